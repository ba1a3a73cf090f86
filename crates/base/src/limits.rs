//! Bounds on everything: sizes, widths, counts (STYLE.md §5). Other crates take their limits
//! from here so that the relationships between them are checked in one place.

/// Smallest block the pipeline writes (one 512-byte sector).
pub const BLOCK_SIZE_MIN: u64 = 512;
/// Largest logical block (ZFS's 16 MiB `recordsize` maximum).
pub const BLOCK_SIZE_MAX: u64 = 16 << 20;
/// Default logical block size of data objects (ZFS's default `recordsize`).
pub const BLOCK_SIZE_DEFAULT: u64 = 128 << 10;
/// Smallest and largest `ashift` a pool may be created with.
pub const ASHIFT_MIN: u8 = 9;
/// Largest `ashift` (64 KiB sectors).
pub const ASHIFT_MAX: u8 = 16;
/// `ashift` used when the user does not choose one (4 KiB sectors).
pub const ASHIFT_DEFAULT: u8 = 12;
/// Maximum copies of a block (DVAs in a block pointer).
pub const COPIES_MAX: usize = 3;
/// Maximum parity of a raidz vdev.
pub const RAIDZ_PARITY_MAX: usize = 3;
/// Maximum children of one raidz or mirror vdev.
pub const VDEV_CHILDREN_MAX: usize = 255;
/// Maximum top-level vdevs in a pool.
pub const TOP_VDEVS_MAX: usize = 1024;
/// Maximum length of a pool name.
pub const POOL_NAME_MAX: usize = 255;
/// Maximum depth of a block-pointer tree (levels of indirection above data).
pub const INDIRECTION_LEVELS_MAX: usize = 8;
/// Smallest leaf device tarn accepts (labels plus a useful amount of space).
pub const DEVICE_SIZE_MIN: u64 = 64 << 20;

const _: () = assert!(BLOCK_SIZE_MIN.is_power_of_two());
const _: () = assert!(BLOCK_SIZE_MAX.is_power_of_two());
const _: () = assert!(BLOCK_SIZE_MIN <= BLOCK_SIZE_DEFAULT && BLOCK_SIZE_DEFAULT <= BLOCK_SIZE_MAX);
const _: () = assert!(ASHIFT_MIN <= ASHIFT_DEFAULT && ASHIFT_DEFAULT <= ASHIFT_MAX);
const _: () = assert!(1u64 << ASHIFT_MIN == BLOCK_SIZE_MIN);
const _: () = assert!(RAIDZ_PARITY_MAX < VDEV_CHILDREN_MAX);

/// Blocks read at once by one scan batch (a scrub or resilver step), each as a job on the
/// reader threads, when the pool's devices serve reads in parallel. With every block's
/// columns also in flight together, a raidz of n leaves has up to this many reads queued
/// per leaf.
pub const BLOCKS_IN_FLIGHT_MAX: usize = 8;
/// Blocks one caller of a batch read (a file read and its read-ahead) has in flight at once:
/// their device reads are all submitted before the first is waited for, so the device queues
/// see them together and merge adjacent ones. Costs no threads; bounds the memory in flight
/// (8 MiB of 128K records). 64 rather than 32: a top-up of half of them puts 512 KiB of
/// adjacent columns on each device of a raidz2 of 10 (docs/PERFORMANCE.md, "Two reads in
/// flight per device").
pub const READS_IN_FLIGHT_MAX: usize = 64;
/// Bytes of records read ahead of a new sequential stream (ZFS's `zfetch_min_distance`): a
/// batch of [`READS_IN_FLIGHT_MAX`] 64K volume blocks, so that every device of a wide raidz
/// has several adjacent column reads queued at once.
pub const READAHEAD_BYTES_MIN: u64 = 2 << 20;
/// Bytes read ahead of a stream that keeps going (ZFS's `zfetch_max_distance`): its
/// distance grows with what its reader consumes, up to this (tarn-objects `readahead`).
/// OpenZFS 2.2 went to 64 MiB; 16 MiB already keeps [`READS_IN_FLIGHT_MAX`] records in
/// flight per batch.
pub const READAHEAD_BYTES_MAX: u64 = 16 << 20;
/// Records in one read-ahead window, whatever their size: small records are not read
/// ahead a whole [`READAHEAD_BYTES_MAX`] (each is a block pointer looked up and a buffer).
pub const READAHEAD_RECORDS_MAX: u64 = 256;
/// Smallest byte limit an engine's clean-block cache may be given (ZFS's `zfs_arc_min`
/// floor): the indirect and dnode blocks of a few busy files.
pub const CACHE_BYTES_MIN: u64 = 16 << 20;
/// Sequential read streams (an object and where its reader stands) remembered per object
/// set for read-ahead.
pub const READAHEAD_STREAMS_MAX: usize = 64;

const _: () = assert!(READAHEAD_BYTES_MIN >= BLOCK_SIZE_DEFAULT);
const _: () = assert!(READAHEAD_BYTES_MIN <= READAHEAD_BYTES_MAX);
const _: () = assert!(READAHEAD_BYTES_MAX <= READAHEAD_RECORDS_MAX * BLOCK_SIZE_DEFAULT);

/// Events an engine keeps in memory (`tarn pool events`); the oldest are dropped beyond it.
pub const EVENTS_MAX: usize = 1000;

/// Default interval between multihost heartbeats (ZFS's `zfs_multihost_interval`).
pub const MULTIHOST_INTERVAL_MS_DEFAULT: u64 = 1000;
/// Shortest and longest heartbeat interval a host may use or an importer will trust.
pub const MULTIHOST_INTERVAL_MS_MIN: u64 = 10;
/// Longest heartbeat interval (see [`MULTIHOST_INTERVAL_MS_MIN`]).
pub const MULTIHOST_INTERVAL_MS_MAX: u64 = 60_000;
/// Intervals without a heartbeat that reached its quorum after which the owner suspends the
/// pool (ZFS's `zfs_multihost_fail_intervals`).
pub const MULTIHOST_FAIL_INTERVALS: u64 = 10;
/// Intervals an importer watches the heartbeats of a pool another host may own (at least;
/// more when the owner's heartbeats record a larger fail count: `activity_check_plan`).
pub const MULTIHOST_IMPORT_INTERVALS: u64 = 20;
/// Largest fail count an importer believes from a heartbeat (bounds its watch).
pub const MULTIHOST_FAIL_INTERVALS_MAX: u64 = 100;

// An importer must watch longer than an owner may go without a heartbeat before it stops
// writing: otherwise a live owner in a slow patch would look dead.
const _: () = assert!(MULTIHOST_IMPORT_INTERVALS > MULTIHOST_FAIL_INTERVALS + 1);
const _: () = assert!(MULTIHOST_FAIL_INTERVALS <= MULTIHOST_FAIL_INTERVALS_MAX);
const _: () = assert!(MULTIHOST_INTERVAL_MS_MIN <= MULTIHOST_INTERVAL_MS_DEFAULT);
const _: () = assert!(MULTIHOST_INTERVAL_MS_DEFAULT <= MULTIHOST_INTERVAL_MS_MAX);
