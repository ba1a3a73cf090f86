//! tarn-objects.
