//! tarn-space.
