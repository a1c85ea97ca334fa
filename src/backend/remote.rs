//! [`RemoteBackend`]: placeholder.
