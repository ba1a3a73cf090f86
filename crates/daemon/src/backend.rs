//! Placeholder backend until the engine adapter lands: it refuses every request with
//! "engine not available" so that the `tarn` binary builds and the daemon can be exercised.
//! The lead replaces this file with the real `EngineBackend`.

use tarn_proto::{CacheEntry, Request, Response};

/// The daemon's handler for the real engine.
#[derive(Debug)]
pub struct EngineBackend {}

impl EngineBackend {
    /// Opens the backend for the daemon of `rundir`.
    pub fn new(rundir: &std::path::Path) -> Result<EngineBackend, String> {
        let _ = rundir;
        Ok(EngineBackend {})
    }
}

impl crate::Handler for EngineBackend {
    fn handle(&self, request: Request) -> Response {
        let _ = request;
        Response::error("engine not available")
    }

    fn cache_entries(&self) -> Vec<CacheEntry> {
        Vec::new()
    }

    fn import_cached(&self, entry: &CacheEntry) -> Result<(), String> {
        let _ = entry;
        Err("engine not available".to_string())
    }

    fn shutdown(&self) {}
}
