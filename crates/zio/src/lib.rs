//! tarn-zio: the I/O pipeline for one block at a time.
//!
//! (The full theory block is written with the pipeline in `pipeline.rs`.)

pub mod store;

pub use store::{BlockStore, WriteProps, ZioError};
