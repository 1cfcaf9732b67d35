//! Metadata through Raft (openraft) with redb storage.
