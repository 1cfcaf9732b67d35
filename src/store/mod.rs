//! The partition log on redb.
