//! tarn-pool.
