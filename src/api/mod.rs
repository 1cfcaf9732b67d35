//! The Liftbridge gRPC service `proto.API`.
