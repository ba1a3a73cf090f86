//! Regular files and block devices.
