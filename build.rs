//! Compiles the protobuf files with protox, a pure-Rust protobuf compiler,
//! so a fresh machine needs no `protoc`.
//!
//! `proto/wire.proto` (the envelope payloads and the stored cursor value)
//! becomes `crate::wire::pb`: plain prost types, no tonic. `proto/api.proto`
//! (the `proto.API` service) becomes `crate::api::proto`, which refers to the
//! wire types instead of generating its own copies, so one Rust type exists
//! per protobuf message.

use std::path::PathBuf;

/// Messages of wire.proto and the Rust paths they are generated at.
const WIRE_TYPES: &[(&str, &str)] = &[
    (".proto.AckPolicy", "crate::wire::pb::AckPolicy"),
    (".proto.Message", "crate::wire::pb::Message"),
    (".proto.Ack", "crate::wire::pb::Ack"),
    (".proto.Cursor", "crate::wire::pb::Cursor"),
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/api.proto");
    println!("cargo:rerun-if-changed=proto/wire.proto");
    // A subscriber's message values and keys are shared with the store's
    // buffers (and decoded without a copy) instead of copied per message.
    let bytes_fields = [".proto.Message.value", ".proto.Message.key"];
    // A publish request's value, key and header values are taken from the
    // HTTP/2 receive buffer without a copy (the envelope built from them
    // copies once).
    let api_bytes_fields = [
        &bytes_fields[..],
        &[
            ".proto.PublishRequest.value",
            ".proto.PublishRequest.key",
            ".proto.PublishToSubjectRequest.value",
            ".proto.PublishToSubjectRequest.key",
        ],
    ]
    .concat();

    let wire_out = PathBuf::from(std::env::var("OUT_DIR")?).join("wire");
    std::fs::create_dir_all(&wire_out)?;
    let wire = protox::compile(["proto/wire.proto"], ["proto"])?;
    tonic_build::configure()
        .build_server(false)
        .build_client(false)
        .out_dir(&wire_out)
        .bytes(bytes_fields)
        .compile_fds(wire)?;

    let api = protox::compile(["proto/api.proto"], ["proto"])?;
    let mut cfg = tonic_build::configure()
        .build_server(true)
        .build_client(true)
        .codec_path("crate::api::codec::ApiCodec")
        .bytes(api_bytes_fields);
    for (proto, rust) in WIRE_TYPES {
        cfg = cfg.extern_path(*proto, *rust);
    }
    cfg.compile_fds(api.clone())?;

    // The server side once more, on its own: every type is the one
    // generated above except a Subscribe stream's item, which is encoded
    // straight from the stored record (`crate::api::outgoing`).
    let server_out = PathBuf::from(std::env::var("OUT_DIR")?).join("server");
    std::fs::create_dir_all(&server_out)?;
    tonic_build::configure()
        .build_server(true)
        .build_client(false)
        .out_dir(&server_out)
        .codec_path("crate::api::codec::ApiCodec")
        .extern_path(".proto", "crate::api::proto")
        .extern_path(".proto.Message", "crate::api::outgoing::Outgoing")
        .compile_fds(api)?;
    Ok(())
}
