//! Compiles proto/api.proto (the `proto.API` service) with protox, a pure-Rust
//! protobuf compiler, so a fresh machine needs no `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/api.proto");
    let fds = protox::compile(["proto/api.proto"], ["proto"])?;
    tonic_build::configure()
        .build_server(true)
        .build_client(true)
        // A subscriber's message values and keys are shared with the store's
        // buffers (and decoded without a copy) instead of copied per message.
        .bytes([".proto.Message.value", ".proto.Message.key"])
        .compile_fds(fds)?;
    Ok(())
}
