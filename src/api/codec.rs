//! The gRPC codec of `proto.API`: prost's, with smaller encode buffers.
//!
//! tonic encodes a response stream into a buffer that starts at 8 KiB and
//! is handed to HTTP/2 once it holds 32 KiB; growing by doubling, that
//! buffer ends up 64 KiB, and one stays allocated per open stream. A
//! subscriber that stops reading keeps its stream open, so the buffer is a
//! large part of what an idle subscriber costs. Handing chunks over at
//! [`YIELD_BYTES`] keeps it at 16–32 KiB (1,000 idle subscribers: 239
//! instead of 296 KiB each), and a replay of 1 KiB messages is as fast as
//! with 32 KiB chunks.

use std::marker::PhantomData;

use tonic::codec::{BufferSettings, Codec, ProstCodec};

/// Initial size of a stream's encode buffer.
const ENCODE_BUFFER: usize = 4 << 10;
/// Encoded bytes that make a chunk for HTTP/2.
const YIELD_BYTES: usize = 16 << 10;

/// [`ProstCodec`] with [`ENCODE_BUFFER`] and [`YIELD_BYTES`] for encoding
/// and tonic's defaults for decoding.
#[derive(Debug, Clone)]
pub struct ApiCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for ApiCodec<T, U> {
    fn default() -> Self {
        ApiCodec(PhantomData)
    }
}

impl<T, U> Codec for ApiCodec<T, U>
where
    T: prost::Message + Send + 'static,
    U: prost::Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = <ProstCodec<T, U> as Codec>::Encoder;
    type Decoder = <ProstCodec<T, U> as Codec>::Decoder;

    fn encoder(&mut self) -> Self::Encoder {
        ProstCodec::<T, U>::raw_encoder(BufferSettings::new(ENCODE_BUFFER, YIELD_BYTES))
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstCodec::<T, U>::raw_decoder(BufferSettings::default())
    }
}
