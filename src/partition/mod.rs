//! A partition's life: recording, acks, readers.
