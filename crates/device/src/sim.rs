//! In-memory devices with seeded faults.
