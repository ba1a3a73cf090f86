//! tarn-engine.
