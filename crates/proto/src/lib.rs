//! tarn-proto.
