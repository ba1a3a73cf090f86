//! tarn-daemon.
