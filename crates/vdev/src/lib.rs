//! tarn-vdev.
