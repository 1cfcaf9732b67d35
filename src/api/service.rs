//! The `proto.API` gRPC service: a thin adapter over [`crate::service`].
//!
//! Each call converts its request into the domain's terms
//! ([`super::convert`]), calls the use case, and converts the answer back
//! into proto types, or the error into a `tonic::Status` — in one place,
//! `impl From<ServiceError> for Status`, with Liftbridge's codes. No
//! validation, metadata logic or NATS traffic lives here; what is here is
//! gRPC's own: the `grpc-timeout` deadline that decides how long Publish
//! waits for its ack, the subscribe handshake, and PublishAsync's two
//! stream halves.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, Stream, StreamExt};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::authz::Authorizer;
use super::convert;
use super::outgoing::Outgoing;
use super::proto::{self, server::api_server::Api};
use crate::partition::reader::{self, ReadEnd};
use crate::service::publish::PublishSession;
use crate::service::{Service, ServiceError};

/// How long PublishAsync waits for the next in-flight ack after the client
/// half-closes (reset by every ack that arrives).
const ASYNC_ACK_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a PublishAsync session open when the node stops still waits
/// for the acks it owes (well inside the gRPC port's 2 s to finish).
const STOP_ACK_WAIT: Duration = Duration::from_millis(500);
/// PublishAsync responses a session may have outstanding: acks owed and
/// responses queued for the client. Each acked request takes a permit
/// before it is published (its ack's place), each async error one before
/// it is queued; a permit comes back when tonic takes the response. So
/// the response queue (this many places) always has room for an ack where
/// it is delivered, and a client that stops reading holds back its own
/// publishing.
const ASYNC_WINDOW: usize = crate::service::acks::SESSION_WINDOW;

/// Service errors as gRPC statuses: the one mapping of this API.
impl From<ServiceError> for Status {
    fn from(e: ServiceError) -> Status {
        match e {
            ServiceError::InvalidArgument(m) => Status::invalid_argument(m),
            ServiceError::NotFound(m) => Status::not_found(m),
            ServiceError::AlreadyExists(m) => Status::already_exists(m),
            ServiceError::FailedPrecondition(m) => Status::failed_precondition(m),
            ServiceError::Internal(m) => Status::internal(m),
            ServiceError::Timeout(m) => Status::deadline_exceeded(m),
            ServiceError::Unavailable(m) => Status::unavailable(m),
            ServiceError::ResourceExhausted(m) => Status::resource_exhausted(m),
            ServiceError::Unknown(m) => Status::unknown(m),
            ServiceError::Read(end) => end.into(),
        }
    }
}

/// How a subscription's end reaches the client.
impl From<ReadEnd> for Status {
    fn from(e: ReadEnd) -> Status {
        let m = e.to_string();
        match e {
            ReadEnd::StopReached | ReadEnd::Empty | ReadEnd::ReadonlyEnd => {
                Status::resource_exhausted(m)
            }
            // Liftbridge passes its reverse reader's io.EOF through
            // status.Convert: UNKNOWN "EOF".
            ReadEnd::ReverseEnd => Status::unknown(m),
            ReadEnd::Deleted => Status::not_found(m),
            ReadEnd::Paused | ReadEnd::Failed => Status::failed_precondition(m),
            ReadEnd::Shutdown | ReadEnd::Moved => Status::unavailable(m),
            ReadEnd::Invalid(_) => Status::invalid_argument(m),
            ReadEnd::Store(_) => Status::internal(m),
        }
    }
}

/// The `proto.API` service. Cheap to clone.
#[derive(Clone)]
pub struct ApiService {
    service: Service,
    /// `tls.client.authz.*`: when set, every call is checked first.
    authz: Option<Arc<Authorizer>>,
    /// Becomes true when the node stops (never without
    /// [`with_stopping`](ApiService::with_stopping)).
    stopping: tokio::sync::watch::Receiver<bool>,
}

/// Parses the `grpc-timeout` header ("<digits><unit>", unit one of
/// H M S m u n).
pub(crate) fn parse_grpc_timeout(v: &str) -> Option<Duration> {
    if v.len() < 2 || v.len() > 9 {
        return None;
    }
    let (num, unit) = v.split_at(v.len() - 1);
    let n: u64 = num.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.checked_mul(3600)?),
        "M" => Duration::from_secs(n.checked_mul(60)?),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// How long to wait for an ack given the call's deadline: a little less
/// than the deadline, so the caller gets DEADLINE_EXCEEDED from the server
/// rather than a cancellation from its own timer.
fn deadline_of<T>(req: &Request<T>) -> Option<Duration> {
    let d = req
        .metadata()
        .get("grpc-timeout")
        .and_then(|v| v.to_str().ok())
        .and_then(parse_grpc_timeout)?;
    Some(d.saturating_sub((d / 10).min(Duration::from_millis(50))))
}

impl ApiService {
    /// Serves `service` over gRPC.
    pub fn new(service: Service) -> ApiService {
        ApiService {
            service,
            authz: None,
            stopping: tokio::sync::watch::channel(false).1,
        }
    }

    /// Ends every open PublishAsync session once `stopping` is true: it
    /// takes no more requests, waits briefly for the acks it owes, and
    /// ends with UNAVAILABLE "server shutting down" (a client reconnects),
    /// so an open session does not hold the node's stop.
    pub fn with_stopping(mut self, stopping: tokio::sync::watch::Receiver<bool>) -> ApiService {
        self.stopping = stopping;
        self
    }

    /// Checks every call with `authz` (Liftbridge's `tls.client.authz`).
    pub fn with_authz(mut self, authz: Arc<Authorizer>) -> ApiService {
        self.authz = Some(authz);
        self
    }

    /// Runs a publish call; once the node is stopping it has
    /// [`STOP_ACK_WAIT`] more to finish (an ack on its way), then ends with
    /// INTERNAL "server shutting down", as a call whose partition stopped
    /// does: a call waiting for an ack that cannot come any more (from a
    /// partition gone from this node, or through NATS) does not hold up
    /// the stop.
    ///
    /// The call comes pinned where the caller keeps it: taken by value, it
    /// would be held twice in this future (the argument and the pinned
    /// local), and moved with it, on every call.
    async fn until_stopped<T>(
        &self,
        mut call: Pin<&mut impl std::future::Future<Output = Result<T, ServiceError>>>,
    ) -> Result<T, ServiceError> {
        let mut stopping = self.stopping.clone();
        tokio::select! {
            biased;
            r = call.as_mut() => return r,
            () = node_stopping(&mut stopping) => {}
        }
        tokio::time::timeout(STOP_ACK_WAIT, call)
            .await
            .unwrap_or_else(|_| Err(ServiceError::Internal("server shutting down".into())))
    }

    /// Lets the call through if authorization is off or allows the
    /// client of `req` to perform `action` on `object`.
    #[allow(clippy::result_large_err)]
    fn authorize<T>(&self, req: &Request<T>, object: &str, action: &str) -> Result<(), Status> {
        match &self.authz {
            None => Ok(()),
            Some(a) => {
                let certs = req.peer_certs();
                a.check(certs.as_deref().map(Vec::as_slice), object, action)
            }
        }
    }

    /// The use-case layer behind this adapter.
    pub fn service(&self) -> &Service {
        &self.service
    }
}

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl Api for ApiService {
    async fn create_stream(
        &self,
        request: Request<proto::CreateStreamRequest>,
    ) -> Result<Response<proto::CreateStreamResponse>, Status> {
        self.authorize(&request, &request.get_ref().name, "CreateStream")?;
        let r = convert::create_stream(request.into_inner());
        self.service.create_stream(r, false).await?;
        Ok(Response::new(proto::CreateStreamResponse {}))
    }

    async fn delete_stream(
        &self,
        request: Request<proto::DeleteStreamRequest>,
    ) -> Result<Response<proto::DeleteStreamResponse>, Status> {
        self.authorize(&request, &request.get_ref().name, "DeleteStream")?;
        self.service
            .delete_stream(&request.into_inner().name)
            .await?;
        Ok(Response::new(proto::DeleteStreamResponse {}))
    }

    async fn pause_stream(
        &self,
        request: Request<proto::PauseStreamRequest>,
    ) -> Result<Response<proto::PauseStreamResponse>, Status> {
        self.authorize(&request, &request.get_ref().name, "PauseStream")?;
        let r = request.into_inner();
        self.service
            .pause_stream(&r.name, r.partitions, r.resume_all)
            .await?;
        Ok(Response::new(proto::PauseStreamResponse {}))
    }

    async fn set_stream_readonly(
        &self,
        request: Request<proto::SetStreamReadonlyRequest>,
    ) -> Result<Response<proto::SetStreamReadonlyResponse>, Status> {
        self.authorize(&request, &request.get_ref().name, "SetStreamReadonly")?;
        let r = request.into_inner();
        self.service
            .set_readonly(&r.name, r.partitions, r.readonly)
            .await?;
        Ok(Response::new(proto::SetStreamReadonlyResponse {}))
    }

    type SubscribeStream = BoxStream<Outgoing>;

    async fn subscribe(
        &self,
        request: Request<proto::SubscribeRequest>,
    ) -> Result<Response<Self::SubscribeStream>, Status> {
        self.authorize(&request, &request.get_ref().stream, "Subscribe")?;
        let r = request.into_inner();
        let (stream, partition): (Arc<str>, i32) = (r.stream.as_str().into(), r.partition);
        let sub = self.service.subscribe(convert::subscribe(r)?).await?;
        // The first (empty) message tells the client the subscription is
        // established, as Liftbridge does.
        let handshake = futures::stream::once(async { Ok(Outgoing::handshake()) });
        let body = ReceiverStream::new(sub.batches).flat_map(move |item| {
            futures::stream::iter(batch_items(stream.clone(), partition, item))
        });
        Ok(Response::new(Box::pin(handshake.chain(body))))
    }

    async fn fetch_metadata(
        &self,
        request: Request<proto::FetchMetadataRequest>,
    ) -> Result<Response<proto::FetchMetadataResponse>, Status> {
        self.authorize(&request, "*", "FetchMetadata")?;
        let r = request.into_inner();
        let state = self.service.state();
        let brokers = state
            .brokers
            .values()
            .map(|b| {
                let (pc, lc) = state.broker_load(&b.id);
                proto::Broker {
                    id: b.id.clone(),
                    host: b.host.clone(),
                    port: i32::from(b.port),
                    partition_count: pc as i32,
                    leader_count: lc as i32,
                }
            })
            .collect();
        let stream_metadata = if r.streams.is_empty() {
            state
                .streams
                .values()
                .map(|s| convert::stream_metadata(&self.service, s))
                .collect()
        } else {
            r.streams
                .iter()
                .map(|n| match state.stream(n) {
                    Some(s) => convert::stream_metadata(&self.service, s),
                    None => proto::StreamMetadata {
                        name: n.clone(),
                        error: proto::stream_metadata::Error::UnknownStream as i32,
                        ..Default::default()
                    },
                })
                .collect()
        };
        let group_metadata = r
            .groups
            .iter()
            .map(|g| match state.group(g) {
                Some(meta) => proto::ConsumerGroupMetadata {
                    group_id: g.clone(),
                    error: proto::consumer_group_metadata::Error::Ok as i32,
                    coordinator: meta.coordinator.clone(),
                    epoch: meta.epoch,
                },
                None => proto::ConsumerGroupMetadata {
                    group_id: g.clone(),
                    error: proto::consumer_group_metadata::Error::UnknownGroup as i32,
                    ..Default::default()
                },
            })
            .collect();
        Ok(Response::new(proto::FetchMetadataResponse {
            brokers,
            stream_metadata,
            group_metadata,
        }))
    }

    async fn fetch_partition_metadata(
        &self,
        request: Request<proto::FetchPartitionMetadataRequest>,
    ) -> Result<Response<proto::FetchPartitionMetadataResponse>, Status> {
        self.authorize(
            &request,
            &request.get_ref().stream,
            "FetchPartitionMetadata",
        )?;
        let r = request.into_inner();
        let s = self
            .service
            .describe_partition(&r.stream, r.partition)
            .await?;
        Ok(Response::new(proto::FetchPartitionMetadataResponse {
            metadata: Some(convert::partition_metadata(&self.service, &s, r.partition)),
        }))
    }

    async fn publish(
        &self,
        request: Request<proto::PublishRequest>,
    ) -> Result<Response<proto::PublishResponse>, Status> {
        self.authorize(&request, &request.get_ref().stream, "Publish")?;
        let deadline = deadline_of(&request);
        let r = convert::publish(request.into_inner());
        let call = std::pin::pin!(self.service.publish(r, deadline));
        let ack = self.until_stopped(call).await?;
        Ok(Response::new(proto::PublishResponse {
            ack,
            ..Default::default()
        }))
    }

    type PublishAsyncStream = BoxStream<proto::PublishResponse>;

    async fn publish_async(
        &self,
        request: Request<Streaming<proto::PublishRequest>>,
    ) -> Result<Response<Self::PublishAsyncStream>, Status> {
        // Each message is checked against its stream; the client is known
        // once, from the connection.
        let client = self.authz.clone().map(|a| {
            let certs = request.peer_certs();
            (a, certs)
        });
        let mut input = request.into_inner();
        let (tx, rx) = mpsc::channel::<Result<proto::PublishResponse, Status>>(ASYNC_WINDOW);
        let window = Arc::new(tokio::sync::Semaphore::new(ASYNC_WINDOW));
        let acked = Arc::new(AckProgress::default());
        // Acks become responses where they are delivered (see
        // `service::acks`): no task between the log and the client.
        let sink = {
            let tx = tx.clone();
            let service = self.service.clone();
            let acked = acked.clone();
            Arc::new(move |ack: proto::Ack| {
                if tx.try_send(Ok(ack_response(&service, ack))).is_err() {
                    // Only an ack nobody was owed (a duplicate) finds the
                    // queue full; or the client is gone.
                    tracing::debug!("PublishAsync ack dropped: session full or closed");
                    return;
                }
                acked
                    .count
                    .fetch_add(1, std::sync::atomic::Ordering::Release);
                acked.notify.notify_one();
            })
        };
        let session = self.service.publish_session(sink)?;
        let me = self.clone();
        let w = window.clone();
        tokio::spawn(async move {
            me.async_session(&mut input, session, tx, w, acked, client)
                .await
        });
        Ok(Response::new(Box::pin(Windowed {
            rx: ReceiverStream::new(rx),
            window,
        })))
    }

    async fn publish_to_subject(
        &self,
        request: Request<proto::PublishToSubjectRequest>,
    ) -> Result<Response<proto::PublishToSubjectResponse>, Status> {
        self.authorize(&request, &request.get_ref().subject, "PublishToSubject")?;
        let deadline = deadline_of(&request);
        let r = convert::publish_to_subject(request.into_inner());
        let call = std::pin::pin!(self.service.publish_to_subject(r, deadline));
        let ack = self.until_stopped(call).await?;
        Ok(Response::new(proto::PublishToSubjectResponse { ack }))
    }

    async fn set_cursor(
        &self,
        request: Request<proto::SetCursorRequest>,
    ) -> Result<Response<proto::SetCursorResponse>, Status> {
        self.authorize(&request, &request.get_ref().stream, "SetCursor")?;
        let r = request.into_inner();
        self.service
            .set_cursor(&r.stream, r.partition, &r.cursor_id, r.offset)
            .await?;
        Ok(Response::new(proto::SetCursorResponse {}))
    }

    async fn fetch_cursor(
        &self,
        request: Request<proto::FetchCursorRequest>,
    ) -> Result<Response<proto::FetchCursorResponse>, Status> {
        self.authorize(&request, &request.get_ref().stream, "FetchCursor")?;
        let r = request.into_inner();
        let offset = self
            .service
            .fetch_cursor(&r.stream, r.partition, &r.cursor_id)
            .await?;
        Ok(Response::new(proto::FetchCursorResponse { offset }))
    }

    async fn join_consumer_group(
        &self,
        request: Request<proto::JoinConsumerGroupRequest>,
    ) -> Result<Response<proto::JoinConsumerGroupResponse>, Status> {
        // Every stream named must be allowed; a request naming none (which
        // the service refuses anyway) is checked against the group id, so
        // no request passes unchecked.
        let r = request.get_ref();
        if r.streams.is_empty() {
            self.authorize(&request, &r.group_id, "JoinConsumerGroup")?;
        }
        for stream in &r.streams {
            self.authorize(&request, stream, "JoinConsumerGroup")?;
        }
        let r = request.into_inner();
        let j = self
            .service
            .join_consumer_group(&r.group_id, &r.consumer_id, r.streams)
            .await?;
        Ok(Response::new(proto::JoinConsumerGroupResponse {
            coordinator: j.coordinator,
            epoch: j.epoch,
            consumer_timeout: j.consumer_timeout.as_nanos() as i64,
            coordinator_timeout: j.coordinator_timeout.as_nanos() as i64,
        }))
    }

    async fn leave_consumer_group(
        &self,
        request: Request<proto::LeaveConsumerGroupRequest>,
    ) -> Result<Response<proto::LeaveConsumerGroupResponse>, Status> {
        self.authorize(&request, &request.get_ref().group_id, "LeaveConsumerGroup")?;
        let r = request.into_inner();
        self.service
            .leave_consumer_group(&r.group_id, &r.consumer_id)
            .await?;
        Ok(Response::new(proto::LeaveConsumerGroupResponse {}))
    }

    async fn fetch_consumer_group_assignments(
        &self,
        request: Request<proto::FetchConsumerGroupAssignmentsRequest>,
    ) -> Result<Response<proto::FetchConsumerGroupAssignmentsResponse>, Status> {
        self.authorize(
            &request,
            &request.get_ref().group_id,
            "FetchConsumerGroupAssignments",
        )?;
        let r = request.into_inner();
        let a = self
            .service
            .fetch_consumer_group_assignments(&r.group_id, &r.consumer_id, r.epoch)
            .await?;
        Ok(Response::new(
            proto::FetchConsumerGroupAssignmentsResponse {
                epoch: a.epoch,
                assignments: a
                    .assignments
                    .into_iter()
                    .map(|(stream, partitions)| proto::PartitionAssignment { stream, partitions })
                    .collect(),
            },
        ))
    }

    async fn report_consumer_group_coordinator(
        &self,
        request: Request<proto::ReportConsumerGroupCoordinatorRequest>,
    ) -> Result<Response<proto::ReportConsumerGroupCoordinatorResponse>, Status> {
        self.authorize(
            &request,
            &request.get_ref().group_id,
            "ReportConsumerGroupCoordinator",
        )?;
        let r = request.into_inner();
        self.service
            .report_consumer_group_coordinator(&r.group_id, &r.consumer_id, &r.coordinator, r.epoch)
            .await?;
        Ok(Response::new(
            proto::ReportConsumerGroupCoordinatorResponse {},
        ))
    }
}

/// The stream items of one reader batch, or the status that ends the
/// stream (tonic's item type is fixed, hence the large error variant).
#[allow(clippy::result_large_err)]
fn batch_items(
    stream: Arc<str>,
    partition: i32,
    item: Result<reader::Delivery, ReadEnd>,
) -> impl Iterator<Item = Result<Outgoing, Status>> {
    let (batch, credit, end) = match item {
        Ok(d) => {
            let (b, c) = d.into_parts();
            (b, Some(c), None)
        }
        Err(e) => (Vec::new(), None, Some(Status::from(e))),
    };
    // The credit lives as long as the iterator, which the stream drops
    // once tonic has taken its last message: the reader reads again only
    // when what it read before is encoded.
    batch
        .into_iter()
        .map(move |r| {
            let _held = &credit;
            Ok(Outgoing::record(stream.clone(), partition, r))
        })
        .chain(end.map(Err))
}

/// The authorizer and the client certificates of a PublishAsync stream.
type AsyncClient = (
    Arc<Authorizer>,
    Option<Arc<Vec<rustls::pki_types::CertificateDer<'static>>>>,
);

fn async_error(
    code: proto::publish_async_error::Code,
    correlation_id: String,
    message: String,
) -> proto::PublishResponse {
    proto::PublishResponse {
        // Older clients expect an (empty) ack next to the error.
        ack: Some(proto::Ack::default()),
        async_error: Some(proto::PublishAsyncError {
            code: code as i32,
            message,
        }),
        correlation_id,
    }
}

/// A failed PublishAsync request's error code.
fn async_error_code(e: &ServiceError) -> proto::publish_async_error::Code {
    use proto::publish_async_error::Code;
    match e {
        ServiceError::InvalidArgument(_) => Code::BadRequest,
        ServiceError::NotFound(_) => Code::NotFound,
        ServiceError::FailedPrecondition(_) => Code::Readonly,
        ServiceError::Unknown(_) => Code::Unknown,
        _ => Code::Internal,
    }
}

/// Acks a PublishAsync session has queued for its client so far.
#[derive(Default)]
struct AckProgress {
    count: std::sync::atomic::AtomicU64,
    notify: tokio::sync::Notify,
}

/// A PublishAsync response stream that gives its window a permit back for
/// every response tonic takes.
struct Windowed {
    rx: ReceiverStream<Result<proto::PublishResponse, Status>>,
    window: Arc<tokio::sync::Semaphore>,
}

impl Stream for Windowed {
    type Item = Result<proto::PublishResponse, Status>;

    fn poll_next(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        let item = std::task::ready!(Pin::new(&mut self.rx).poll_next(cx));
        if item.is_some() {
            self.window.add_permits(1);
        }
        std::task::Poll::Ready(item)
    }
}

impl Drop for Windowed {
    fn drop(&mut self) {
        // Wake a publisher waiting for the window: the client is gone.
        self.window.close();
    }
}

/// The response to one ack of a PublishAsync session.
fn ack_response(service: &Service, ack: proto::Ack) -> proto::PublishResponse {
    use proto::publish_async_error::Code;
    let corr = ack.correlation_id.clone();
    match proto::ack::Error::try_from(ack.ack_error).unwrap_or(proto::ack::Error::Unknown) {
        proto::ack::Error::Ok => proto::PublishResponse {
            ack: Some(ack),
            async_error: None,
            correlation_id: corr,
        },
        proto::ack::Error::IncorrectOffset => async_error(
            Code::IncorrectOffset,
            corr,
            "incorrect expected offset".into(),
        ),
        proto::ack::Error::TooLarge => {
            async_error(Code::BadRequest, corr, "message too large".into())
        }
        proto::ack::Error::Encryption => {
            async_error(Code::EncryptionFailed, corr, "encryption failed".into())
        }
        // A failed write: the log's fault says why, when the partition is
        // led here.
        proto::ack::Error::Unknown => {
            let why = service
                .write_failure(&ack.stream)
                .map_or_else(|| "unknown error".into(), |e| e.to_string());
            async_error(Code::Unknown, corr, why)
        }
    }
}

impl ApiService {
    /// One PublishAsync stream: this task publishes the requests; their
    /// acks are queued for the client by the session's sink as they are
    /// delivered. Once the input ends, the task waits for the acks still
    /// owed (the budget runs from the last progress), then ends the
    /// response stream.
    async fn async_session(
        &self,
        input: &mut Streaming<proto::PublishRequest>,
        mut session: PublishSession,
        tx: mpsc::Sender<Result<proto::PublishResponse, Status>>,
        window: Arc<tokio::sync::Semaphore>,
        acked: Arc<AckProgress>,
        client: Option<AsyncClient>,
    ) {
        let mut s = AsyncSession {
            service: &self.service,
            session: &mut session,
            tx: &tx,
            window: &window,
            published: 0,
        };
        let mut stopping = self.stopping.clone();
        // The input ends with the client half-closing it (or failing), or
        // with the node stopping.
        loop {
            if *stopping.borrow() {
                break;
            }
            // Publishes the session holds go out before it waits for the
            // client: nothing is held while the client waits for acks.
            let next = match input.message().now_or_never() {
                Some(next) => next,
                None => {
                    if !s.flush().await {
                        break;
                    }
                    tokio::select! {
                        next = input.message() => next,
                        () = node_stopping(&mut stopping) => break,
                    }
                }
            };
            let Ok(Some(r)) = next else { break };
            let corr = r.correlation_id.clone();
            if let Some((authz, certs)) = &client {
                // Unlike Liftbridge, which reports the error and then
                // publishes anyway, a denied message is not published.
                if let Err(st) =
                    authz.check(certs.as_deref().map(Vec::as_slice), &r.stream, "Publish")
                {
                    let resp = async_error(
                        proto::publish_async_error::Code::PermissionDenied,
                        corr,
                        st.message().to_string(),
                    );
                    if !s.answer(resp, false).await {
                        break;
                    }
                    continue;
                }
            }
            let mut r = convert::publish(r);
            let wants_ack = r.ack_policy != crate::wire::AckPolicy::None;
            if wants_ack {
                // The ack's place in the window (and the response queue).
                if !s.place().await {
                    break;
                }
                r.ack_inbox = s.session.inbox().to_string();
            }
            match s.service.publish_in_session(s.session, r).await {
                Ok(()) => {
                    if wants_ack {
                        s.published += 1;
                    }
                }
                Err(e) => {
                    // No ack will come: the error takes the ack's place.
                    let resp = async_error(async_error_code(&e), corr, e.to_string());
                    if !s.answer(resp, wants_ack).await {
                        break;
                    }
                }
            }
            if !s.report_failed().await {
                break;
            }
        }
        let _ = s.flush().await;
        let published = s.published;
        let stopped = *stopping.borrow();
        // The acks still owed, while they keep coming (at a stop, for
        // a short while only).
        let stop_by = tokio::time::Instant::now() + STOP_ACK_WAIT;
        loop {
            let notified = acked.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if acked.count.load(std::sync::atomic::Ordering::Acquire) >= published || tx.is_closed()
            {
                break;
            }
            let wait = if stopped {
                stop_by.saturating_duration_since(tokio::time::Instant::now())
            } else {
                ASYNC_ACK_TIMEOUT
            };
            if tokio::time::timeout(wait, notified).await.is_err() {
                break;
            }
        }
        if stopped {
            // The client learns why the stream ends (unless it has left
            // a full queue of responses unread: then the stream just ends).
            let _ = tx.try_send(Err(Status::unavailable("server shutting down")));
        }
        // Unregistered: the sink (and its sender) goes; the stream ends
        // once the client has taken what is queued.
        drop(session);
    }
}

/// Resolves once `stopping` is true (never if its sender is gone first).
async fn node_stopping(stopping: &mut tokio::sync::watch::Receiver<bool>) {
    crate::service::watch_until(stopping, |stop| *stop).await;
}

/// A PublishAsync session being served: its window of places (each acked
/// request, or error response in place of an ack, takes one until the
/// client has its response) and the acks it owes.
struct AsyncSession<'a> {
    service: &'a Service,
    session: &'a mut PublishSession,
    tx: &'a mpsc::Sender<Result<proto::PublishResponse, Status>>,
    window: &'a tokio::sync::Semaphore,
    /// Acked requests published (their acks are owed).
    published: u64,
}

impl AsyncSession<'_> {
    /// Takes a place in the window; false once the client is gone. The
    /// publishes the session holds go out before it waits for a place:
    /// their acks are what frees places.
    async fn place(&mut self) -> bool {
        if let Ok(p) = self.window.try_acquire() {
            p.forget();
            return true;
        }
        if !self.flush().await {
            return false;
        }
        match self.window.acquire().await {
            Ok(p) => {
                p.forget();
                true
            }
            Err(_) => false,
        }
    }

    /// Sends an error response; `placed`: it takes the place its request
    /// already has, else it takes one. False once the client is gone.
    async fn answer(&mut self, resp: proto::PublishResponse, placed: bool) -> bool {
        if !placed && !self.place().await {
            return false;
        }
        self.tx.send(Ok(resp)).await.is_ok()
    }

    /// Publishes what the session holds and answers those that failed.
    async fn flush(&mut self) -> bool {
        self.service.flush_session(self.session).await;
        self.report_failed().await
    }

    /// Answers held publishes that could not be published after all (an
    /// acked one's ack is no longer owed: its error takes its place).
    async fn report_failed(&mut self) -> bool {
        for f in self.session.take_failed() {
            if f.acked {
                self.published -= 1;
            }
            let resp = async_error(
                async_error_code(&f.error),
                f.correlation_id,
                f.error.to_string(),
            );
            if !Box::pin(self.answer(resp, f.acked)).await {
                return false;
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A session's failed resume (INTERNAL from the service) is the async
    /// error code INTERNAL, not READONLY, which is for FAILED_PRECONDITION.
    #[test]
    fn async_error_codes() {
        use proto::publish_async_error::Code;
        let code = |e: ServiceError| async_error_code(&e);
        assert_eq!(
            code(ServiceError::Internal("failed to resume stream: x".into())),
            Code::Internal
        );
        assert_eq!(
            code(ServiceError::FailedPrecondition(
                "Partition is readonly".into()
            )),
            Code::Readonly
        );
        assert_eq!(code(ServiceError::NotFound("x".into())), Code::NotFound);
        assert_eq!(
            code(ServiceError::InvalidArgument("x".into())),
            Code::BadRequest
        );
    }

    #[test]
    fn grpc_timeout_units() {
        assert_eq!(parse_grpc_timeout("5S"), Some(Duration::from_secs(5)));
        assert_eq!(parse_grpc_timeout("100m"), Some(Duration::from_millis(100)));
        assert_eq!(parse_grpc_timeout("2M"), Some(Duration::from_secs(120)));
        assert_eq!(parse_grpc_timeout("7u"), Some(Duration::from_micros(7)));
        assert_eq!(parse_grpc_timeout("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_grpc_timeout("S"), None);
        assert_eq!(parse_grpc_timeout("5x"), None);
        assert_eq!(parse_grpc_timeout("1234567890S"), None);
    }
}
