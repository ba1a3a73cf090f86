//! Device labels and the uberblock ring.
//!
//! Every leaf device carries four copies of a 256 KiB label, two at the front and two at the
//! back, so that one overwritten end (a partition table, a `dd` to the wrong disk) leaves two
//! good copies. Each label holds the pool configuration (name, GUIDs, the vdev tree, feature
//! flags) and a ring of uberblocks.
//!
//! ```text
//!  device:  | L0 | L1 | boot reserve (to 4 MiB) | data area ............ | L2 | L3 |
//!           0   256K  512K                      4M                  end-512K end-256K end
//!  label:   | blank 16K | config header + TLV config (112K) | uberblock ring (128K)     |
//!  ring:    slot = max(1 KiB, 1 << ashift); slots = 128K / slot; txg T goes to T % slots
//! ```
//! `end` is the device size rounded down to 256 KiB. The config header is 64 bytes:
//! magic u64, format version u64, payload length u64, sha256 of the payload [u64; 4], pad.

use crate::checksum::{Checksum, ChecksumKind, checksum};
use crate::wire::{Reader, TlvReader, TlvWriter, Writer, tlv_str, tlv_u64};
use crate::{FORMAT_VERSION, FormatError};
use tarn_base::{Guid, Txg};

/// Size of one label copy.
pub const LABEL_SIZE: u64 = 256 << 10;
/// Number of label copies per device.
pub const LABEL_COUNT: usize = 4;
/// Offset of the config header inside a label.
pub const CONFIG_OFFSET: u64 = 16 << 10;
/// Bytes available to the config (header included).
pub const CONFIG_SIZE: u64 = 112 << 10;
/// Offset of the uberblock ring inside a label.
pub const RING_OFFSET: u64 = 128 << 10;
/// Size of the uberblock ring.
pub const RING_SIZE: u64 = 128 << 10;
/// Where the data area of every leaf starts.
pub const DATA_START: u64 = 4 << 20;
/// Smallest uberblock slot.
pub const UBERBLOCK_SLOT_MIN: u64 = 1 << 10;

const CONFIG_MAGIC: u64 = 0x6c62_6c6e_7261_7400; // "\0tarnlbl"
const CONFIG_HEADER_SIZE: usize = 64;

const _: () = assert!(CONFIG_OFFSET + CONFIG_SIZE == RING_OFFSET);
const _: () = assert!(RING_OFFSET + RING_SIZE == LABEL_SIZE);
const _: () = assert!(2 * LABEL_SIZE <= DATA_START);

/// Device size usable for labels: rounded down to a label boundary.
#[must_use]
pub fn aligned_device_size(size: u64) -> u64 {
    size / LABEL_SIZE * LABEL_SIZE
}

/// Byte offsets of the four labels on a device of `size` bytes (at least four labels' worth:
/// callers check [`data_area`] or the size first).
#[must_use]
pub fn label_offsets(size: u64) -> [u64; LABEL_COUNT] {
    let end = aligned_device_size(size);
    assert!(
        end >= 4 * LABEL_SIZE,
        "device of {size} bytes cannot hold four labels"
    );
    [0, LABEL_SIZE, end - 2 * LABEL_SIZE, end - LABEL_SIZE]
}

/// The data area `[start, end)` of a leaf of `size` bytes, or `None` if it is too small.
#[must_use]
pub fn data_area(size: u64) -> Option<(u64, u64)> {
    let end = aligned_device_size(size).checked_sub(2 * LABEL_SIZE)?;
    (end > DATA_START).then_some((DATA_START, end))
}

/// The smallest device whose data area holds `asize` bytes: what a replacement of a leaf
/// of that size needs (`status -j`'s `rep_dev_size`). The inverse of [`data_area`].
#[must_use]
pub fn min_device_size(asize: u64) -> u64 {
    (DATA_START + asize + 2 * LABEL_SIZE).div_ceil(LABEL_SIZE) * LABEL_SIZE
}

const _: () = assert!(
    RING_SIZE >> tarn_base::limits::ASHIFT_MAX >= 2,
    "ring holds >= 2 slots"
);

/// Size of an uberblock slot for a pool with `ashift`.
#[must_use]
pub fn uberblock_slot_size(ashift: u8) -> u64 {
    (1u64 << ashift).max(UBERBLOCK_SLOT_MIN)
}

/// Number of slots in the ring for `ashift`.
#[must_use]
pub fn uberblock_slots(ashift: u8) -> u64 {
    RING_SIZE / uberblock_slot_size(ashift)
}

/// Offset, inside a label, of the slot that txg `txg` is written to.
#[must_use]
pub fn uberblock_slot_offset(ashift: u8, txg: Txg) -> u64 {
    RING_OFFSET + (txg.0 % uberblock_slots(ashift)) * uberblock_slot_size(ashift)
}

/// State of a pool as recorded in its labels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum PoolState {
    /// Imported (or was, when the host died).
    Active = 0,
    /// Cleanly exported.
    Exported = 1,
    /// Destroyed; importable only with `-D`.
    Destroyed = 2,
    /// A hot spare not in use (the label belongs to no single pool).
    Spare = 3,
    /// A cache device (L2ARC): its label names the pool, it holds no uberblocks and nothing
    /// the pool needs (feature `org.tarn:l2cache`).
    L2cache = 4,
}

impl PoolState {
    fn from_u64(value: u64) -> Result<Self, FormatError> {
        Ok(match value {
            0 => PoolState::Active,
            1 => PoolState::Exported,
            2 => PoolState::Destroyed,
            3 => PoolState::Spare,
            4 => PoolState::L2cache,
            _ => {
                return Err(FormatError::Invalid {
                    what: "label",
                    why: "unknown pool state",
                });
            }
        })
    }

    /// Lowercase name as `tarn pool import` prints it.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            PoolState::Active => "active",
            PoolState::Exported => "exported",
            PoolState::Destroyed => "destroyed",
            PoolState::Spare => "spare",
            PoolState::L2cache => "l2cache",
        }
    }
}

/// Kind of a node in the vdev tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VdevKind {
    /// The root of the tree; its children are the top-level vdevs.
    Root,
    /// A leaf: a file or a block device.
    Disk,
    /// N-way mirror.
    Mirror,
    /// raidz with 1, 2 or 3 parity columns.
    Raidz {
        /// Parity columns.
        parity: u8,
    },
    /// dRAID: fixed-width redundancy groups over permuted rows of the children, with
    /// distributed spare space (feature `org.tarn:draid`; docs/FORMAT.md "dRAID layout").
    Draid(DraidConfig),
    /// The group of hot spares (child of the root, not a top-level data vdev).
    Spares,
    /// The group of cache devices (L2ARC; child of the root, not a top-level data vdev).
    L2cache,
    /// A leaf being replaced: first child old, second new (during resilver).
    Replacing,
    /// A spare in use: first child the original, second the spare.
    SpareInUse,
    /// A distributed spare of a dRAID vdev standing in for a child (a leaf without a device
    /// of its own: its bytes are spare space on the other children; docs/FORMAT.md 11a).
    DraidSpare,
}

impl VdevKind {
    /// The name ZFS uses in configs and `status` (`mirror`, `raidz2`, ...).
    #[must_use]
    pub fn name(self) -> String {
        match self {
            VdevKind::Root => "root".into(),
            VdevKind::Disk => "disk".into(),
            VdevKind::Mirror => "mirror".into(),
            VdevKind::Raidz { parity } => {
                assert!(
                    (1..=3).contains(&parity),
                    "raidz parity {parity} is not 1..=3"
                );
                format!("raidz{parity}")
            }
            VdevKind::Draid(config) => config.stored_name(),
            VdevKind::Spares => "spares".into(),
            VdevKind::L2cache => "l2cache".into(),
            VdevKind::Replacing => "replacing".into(),
            VdevKind::SpareInUse => "spare".into(),
            VdevKind::DraidSpare => "dspare".into(),
        }
    }

    /// Parses [`VdevKind::name`] output.
    pub fn parse(name: &str) -> Result<Self, FormatError> {
        Ok(match name {
            "root" => VdevKind::Root,
            "disk" => VdevKind::Disk,
            "mirror" => VdevKind::Mirror,
            "raidz1" => VdevKind::Raidz { parity: 1 },
            "raidz2" => VdevKind::Raidz { parity: 2 },
            "raidz3" => VdevKind::Raidz { parity: 3 },
            "spares" => VdevKind::Spares,
            "l2cache" => VdevKind::L2cache,
            "replacing" => VdevKind::Replacing,
            "spare" => VdevKind::SpareInUse,
            "dspare" => VdevKind::DraidSpare,
            draid if draid.starts_with("draid") => VdevKind::Draid(DraidConfig::parse(draid)?),
            _ => {
                return Err(FormatError::Invalid {
                    what: "vdev tree",
                    why: "unknown vdev kind",
                });
            }
        })
    }
}

/// The geometry of a dRAID top-level vdev apart from its child count (which is the number
/// of children in the tree): parity and data columns per redundancy group, distributed
/// spares, and the seed of the permutations that lay the groups over the children
/// (docs/FORMAT.md "dRAID layout"). Stored as the kind name
/// `draid<parity>:<data>d:<spares>s:<seed as 16 hex digits>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DraidConfig {
    /// Parity columns per group (1..=3).
    pub parity: u8,
    /// Data columns per group (at least 1).
    pub data: u8,
    /// Distributed spares (columns of spare space per row).
    pub spares: u8,
    /// Seed of the permutations.
    pub seed: u64,
}

impl DraidConfig {
    /// The kind name stored in labels.
    #[must_use]
    pub fn stored_name(self) -> String {
        format!(
            "draid{}:{}d:{}s:{:016x}",
            self.parity, self.data, self.spares, self.seed
        )
    }

    /// Parses [`DraidConfig::stored_name`] output; the numbers are range-checked here
    /// (parity 1..=3, data at least 1), the fit to the child count by the vdev layer.
    pub fn parse(name: &str) -> Result<DraidConfig, FormatError> {
        let bad = FormatError::Invalid {
            what: "vdev tree",
            why: "malformed draid kind",
        };
        let rest = name.strip_prefix("draid").ok_or(bad.clone())?;
        let mut parts = rest.split(':');
        let mut field = |suffix: &str| -> Result<&str, FormatError> {
            let part = parts.next().ok_or(bad.clone())?;
            part.strip_suffix(suffix).ok_or(bad.clone())
        };
        let parity: u8 = field("")?.parse().map_err(|_| bad.clone())?;
        let data: u8 = field("d")?.parse().map_err(|_| bad.clone())?;
        let spares: u8 = field("s")?.parse().map_err(|_| bad.clone())?;
        let seed_hex = field("")?;
        if seed_hex.len() != 16 {
            return Err(bad);
        }
        let seed = u64::from_str_radix(seed_hex, 16).map_err(|_| bad.clone())?;
        if parts.next().is_some() || !(1..=3).contains(&parity) || data == 0 {
            return Err(bad);
        }
        Ok(DraidConfig {
            parity,
            data,
            spares,
            seed,
        })
    }
}

/// One node of the vdev tree as stored in labels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VdevTree {
    /// Kind of node.
    pub kind: VdevKind,
    /// GUID of this vdev.
    pub guid: Guid,
    /// Index among its parent's children (for top-level vdevs: the DVA vdev number).
    pub id: u32,
    /// Sector size shift (top-level vdevs and leaves).
    pub ashift: u8,
    /// Allocatable bytes: for a leaf, its data area; for a top-level vdev, its address space.
    pub asize: u64,
    /// Log2 of the metaslab size (top-level vdevs only; zero elsewhere).
    pub metaslab_shift: u8,
    /// Last known path (leaves only). Import never trusts it; it is for messages.
    pub path: String,
    /// Children in order.
    pub children: Vec<VdevTree>,
    /// Administratively offline (leaves).
    pub offline: bool,
    /// The leaf's data is incomplete: it is being resilvered and must not be read until
    /// the resilver finishes (leaves; format version 1, tag 10, omitted when false).
    pub resilvering: bool,
    /// A log device: the top-level vdev holds only intent-log blocks (top-level vdevs;
    /// feature `org.tarn:intent_log`, tag 11, omitted when false).
    pub log: bool,
    /// A special allocation-class device: the top-level vdev holds metadata and small file
    /// blocks (top-level vdevs; feature `org.tarn:allocation_classes`, tag 12, omitted when
    /// false).
    pub special: bool,
}

/// Smallest metaslab shift a vdev tree may record (64 KiB metaslabs).
pub const METASLAB_SHIFT_MIN: u8 = 16;
/// Largest metaslab shift a vdev tree may record (1 TiB metaslabs).
pub const METASLAB_SHIFT_MAX: u8 = 40;

/// Deepest vdev tree accepted on decode (root > top > replacing > leaf, with room).
const VDEV_TREE_DEPTH_MAX: usize = 6;

mod tag {
    pub(super) const KIND: u16 = 1;
    pub(super) const GUID: u16 = 2;
    pub(super) const ID: u16 = 3;
    pub(super) const ASHIFT: u16 = 4;
    pub(super) const ASIZE: u16 = 5;
    pub(super) const METASLAB_SHIFT: u16 = 6;
    pub(super) const PATH: u16 = 7;
    pub(super) const CHILD: u16 = 8;
    pub(super) const OFFLINE: u16 = 9;
    pub(super) const RESILVERING: u16 = 10;
    pub(super) const LOG: u16 = 11;
    pub(super) const SPECIAL: u16 = 12;
}

impl VdevTree {
    /// Encodes as a TLV field list.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let mut w = TlvWriter::new();
        w.str(tag::KIND, &self.kind.name());
        w.u64(tag::GUID, self.guid.0);
        w.u64(tag::ID, u64::from(self.id));
        w.u64(tag::ASHIFT, u64::from(self.ashift));
        w.u64(tag::ASIZE, self.asize);
        w.u64(tag::METASLAB_SHIFT, u64::from(self.metaslab_shift));
        if !self.path.is_empty() {
            w.str(tag::PATH, &self.path);
        }
        if self.offline {
            w.u64(tag::OFFLINE, 1);
        }
        if self.resilvering {
            w.u64(tag::RESILVERING, 1);
        }
        if self.log {
            w.u64(tag::LOG, 1);
        }
        if self.special {
            w.u64(tag::SPECIAL, 1);
        }
        for child in &self.children {
            w.bytes(tag::CHILD, &child.encode());
        }
        w.finish()
    }

    /// Decodes a TLV field list; unknown tags are skipped.
    pub fn decode(bytes: &[u8]) -> Result<Self, FormatError> {
        VdevTree::decode_depth(bytes, 0)
    }

    fn decode_depth(bytes: &[u8], depth: usize) -> Result<Self, FormatError> {
        const WHAT: &str = "vdev tree";
        if depth > VDEV_TREE_DEPTH_MAX {
            return Err(FormatError::Invalid {
                what: WHAT,
                why: "nested too deeply",
            });
        }
        let mut tree = VdevTree {
            kind: VdevKind::Disk,
            guid: Guid(0),
            id: 0,
            ashift: 0,
            asize: 0,
            metaslab_shift: 0,
            path: String::new(),
            children: Vec::new(),
            offline: false,
            resilvering: false,
            log: false,
            special: false,
        };
        let mut have_kind = false;
        let mut reader = TlvReader::new(bytes, WHAT);
        while let Some((field, value)) = reader.next_field()? {
            match field {
                tag::KIND => {
                    tree.kind = VdevKind::parse(&tlv_str(value, WHAT)?)?;
                    have_kind = true;
                }
                tag::GUID => tree.guid = Guid(tlv_u64(value, WHAT)?),
                tag::ID => tree.id = small(tlv_u64(value, WHAT)?, WHAT)?,
                tag::ASHIFT => {
                    let (min, max) = (tarn_base::limits::ASHIFT_MIN, tarn_base::limits::ASHIFT_MAX);
                    tree.ashift = shift_field(value, min, max, "ashift out of range")?;
                }
                tag::ASIZE => tree.asize = tlv_u64(value, WHAT)?,
                tag::METASLAB_SHIFT => {
                    // A tiny shift would mean billions of metaslabs in memory.
                    let (min, max) = (METASLAB_SHIFT_MIN, METASLAB_SHIFT_MAX);
                    tree.metaslab_shift =
                        shift_field(value, min, max, "metaslab shift out of range")?;
                }
                tag::PATH => tree.path = tlv_str(value, WHAT)?,
                tag::OFFLINE => tree.offline = tlv_u64(value, WHAT)? != 0,
                tag::RESILVERING => tree.resilvering = tlv_u64(value, WHAT)? != 0,
                tag::LOG => tree.log = tlv_u64(value, WHAT)? != 0,
                tag::SPECIAL => tree.special = tlv_u64(value, WHAT)? != 0,
                tag::CHILD => {
                    if tree.children.len() >= tarn_base::limits::TOP_VDEVS_MAX {
                        return Err(FormatError::Invalid {
                            what: WHAT,
                            why: "too many children",
                        });
                    }
                    tree.children
                        .push(VdevTree::decode_depth(value, depth + 1)?);
                }
                _ => {}
            }
        }
        if !have_kind || tree.guid.0 == 0 {
            return Err(FormatError::Invalid {
                what: WHAT,
                why: "missing kind or guid",
            });
        }
        Ok(tree)
    }

    /// Every leaf beneath (or this node if it is a leaf), in tree order.
    #[must_use]
    pub fn leaves(&self) -> Vec<&VdevTree> {
        let mut out = Vec::new();
        let mut stack = vec![self];
        while let Some(node) = stack.pop() {
            if node.kind == VdevKind::Disk {
                out.push(node);
            } else {
                stack.extend(node.children.iter().rev());
            }
        }
        out
    }

    /// Sum of this node's GUID and every descendant's (the uberblock's `guid_sum` is this for
    /// the root: import uses it to tell whether every device was found).
    #[must_use]
    pub fn guid_sum(&self) -> u64 {
        self.children
            .iter()
            .fold(self.guid.0, |sum, child| sum.wrapping_add(child.guid_sum()))
    }

    /// Finds the node with `guid`.
    #[must_use]
    pub fn find(&self, guid: Guid) -> Option<&VdevTree> {
        if self.guid == guid {
            return Some(self);
        }
        self.children.iter().find_map(|child| child.find(guid))
    }
}

/// A shift field: zero (unset) or within `min..=max`. Shifts from disk index arrays and size
/// slots, so an out-of-range one is refused here rather than panicking later.
fn shift_field(value: &[u8], min: u8, max: u8, why: &'static str) -> Result<u8, FormatError> {
    const WHAT: &str = "vdev tree";
    let shift: u8 = small(tlv_u64(value, WHAT)?, WHAT)?;
    if shift != 0 && !(min..=max).contains(&shift) {
        return Err(FormatError::Invalid { what: WHAT, why });
    }
    Ok(shift)
}

fn small<T: TryFrom<u64>>(value: u64, what: &'static str) -> Result<T, FormatError> {
    T::try_from(value).map_err(|_| FormatError::Invalid {
        what,
        why: "value out of range",
    })
}

/// The pool configuration every label carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolConfig {
    /// Format version of the pool.
    pub version: u64,
    /// Pool name.
    pub name: String,
    /// Pool GUID.
    pub pool_guid: Guid,
    /// Txg in which this config was written.
    pub txg: Txg,
    /// Pool state.
    pub state: PoolState,
    /// Host id of the host that last imported the pool.
    pub hostid: u64,
    /// Host name of the host that last imported the pool.
    pub hostname: String,
    /// GUID of the leaf this label is on.
    pub this_guid: Guid,
    /// GUID of the top-level vdev this leaf belongs to.
    pub top_guid: Guid,
    /// The whole vdev tree (root node).
    pub vdev_tree: VdevTree,
    /// Feature flags a reader must understand to read the pool at all.
    pub features_for_read: Vec<String>,
    /// Feature flags a writer must understand to write the pool.
    pub features_for_write: Vec<String>,
}

/// Most feature flags a config may list per kind.
const FEATURES_MAX: usize = 256;

mod config_tag {
    pub(super) const VERSION: u16 = 1;
    pub(super) const NAME: u16 = 2;
    pub(super) const POOL_GUID: u16 = 3;
    pub(super) const TXG: u16 = 4;
    pub(super) const STATE: u16 = 5;
    pub(super) const HOSTID: u16 = 6;
    pub(super) const HOSTNAME: u16 = 7;
    pub(super) const THIS_GUID: u16 = 8;
    pub(super) const TOP_GUID: u16 = 9;
    pub(super) const VDEV_TREE: u16 = 10;
    pub(super) const FEATURE_READ: u16 = 11;
    pub(super) const FEATURE_WRITE: u16 = 12;
}

impl PoolConfig {
    /// Encodes the config as a TLV payload.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        use config_tag as t;
        let mut w = TlvWriter::new();
        w.u64(t::VERSION, self.version);
        w.str(t::NAME, &self.name);
        w.u64(t::POOL_GUID, self.pool_guid.0);
        w.u64(t::TXG, self.txg.0);
        w.u64(t::STATE, self.state as u64);
        w.u64(t::HOSTID, self.hostid);
        w.str(t::HOSTNAME, &self.hostname);
        w.u64(t::THIS_GUID, self.this_guid.0);
        w.u64(t::TOP_GUID, self.top_guid.0);
        w.bytes(t::VDEV_TREE, &self.vdev_tree.encode());
        for feature in &self.features_for_read {
            w.str(t::FEATURE_READ, feature);
        }
        for feature in &self.features_for_write {
            w.str(t::FEATURE_WRITE, feature);
        }
        w.finish()
    }

    /// Decodes a TLV payload.
    pub fn decode(bytes: &[u8]) -> Result<Self, FormatError> {
        use config_tag as t;
        const WHAT: &str = "label config";
        let mut version = None;
        let mut name = None;
        let mut pool_guid = None;
        let mut txg = Txg(0);
        let mut state = PoolState::Active;
        let mut hostid = 0;
        let mut hostname = String::new();
        let mut this_guid = None;
        let mut top_guid = Guid(0);
        let mut vdev_tree = None;
        let mut features_for_read = Vec::new();
        let mut features_for_write = Vec::new();
        let mut reader = TlvReader::new(bytes, WHAT);
        while let Some((field, value)) = reader.next_field()? {
            match field {
                t::VERSION => version = Some(tlv_u64(value, WHAT)?),
                t::NAME => name = Some(tlv_str(value, WHAT)?),
                t::POOL_GUID => pool_guid = Some(Guid(tlv_u64(value, WHAT)?)),
                t::TXG => txg = Txg(tlv_u64(value, WHAT)?),
                t::STATE => state = PoolState::from_u64(tlv_u64(value, WHAT)?)?,
                t::HOSTID => hostid = tlv_u64(value, WHAT)?,
                t::HOSTNAME => hostname = tlv_str(value, WHAT)?,
                t::THIS_GUID => this_guid = Some(Guid(tlv_u64(value, WHAT)?)),
                t::TOP_GUID => top_guid = Guid(tlv_u64(value, WHAT)?),
                t::VDEV_TREE => vdev_tree = Some(VdevTree::decode(value)?),
                t::FEATURE_READ | t::FEATURE_WRITE => {
                    let list = if field == t::FEATURE_READ {
                        &mut features_for_read
                    } else {
                        &mut features_for_write
                    };
                    // Dropping a feature name could let an old reader ignore a feature it
                    // must understand: too many is corruption, not something to truncate.
                    if list.len() >= FEATURES_MAX {
                        return Err(FormatError::Invalid {
                            what: WHAT,
                            why: "too many feature flags",
                        });
                    }
                    list.push(tlv_str(value, WHAT)?);
                }
                _ => {}
            }
        }
        let missing = |why| FormatError::Invalid { what: WHAT, why };
        Ok(PoolConfig {
            version: version.ok_or(missing("no version"))?,
            name: name.ok_or(missing("no pool name"))?,
            pool_guid: pool_guid.ok_or(missing("no pool guid"))?,
            txg,
            state,
            hostid,
            hostname,
            this_guid: this_guid.ok_or(missing("no device guid"))?,
            top_guid,
            vdev_tree: vdev_tree.ok_or(missing("no vdev tree"))?,
            features_for_read,
            features_for_write,
        })
    }

    /// Encodes the config region of a label (header + payload), padded to [`CONFIG_SIZE`].
    pub fn encode_region(&self) -> Result<Vec<u8>, FormatError> {
        let payload = self.encode();
        if payload.len() + CONFIG_HEADER_SIZE > CONFIG_SIZE as usize {
            return Err(FormatError::Invalid {
                what: "label config",
                why: "config too large",
            });
        }
        let sum = checksum(ChecksumKind::Sha256, &payload);
        let mut w = Writer::new();
        w.u64(CONFIG_MAGIC);
        w.u64(FORMAT_VERSION);
        w.u64(payload.len() as u64);
        for word in sum.0 {
            w.u64(word);
        }
        w.pad_to(CONFIG_HEADER_SIZE);
        w.bytes(&payload);
        w.pad_to(CONFIG_SIZE as usize);
        Ok(w.finish())
    }

    /// Decodes a config region read from a label. A blank region, a bad magic, a checksum
    /// mismatch or a newer format version are all errors (the caller tries the other copies).
    pub fn decode_region(bytes: &[u8]) -> Result<Self, FormatError> {
        const WHAT: &str = "label config";
        let mut r = Reader::new(bytes, WHAT);
        if r.u64()? != CONFIG_MAGIC {
            return Err(FormatError::BadMagic { what: WHAT });
        }
        let version = r.u64()?;
        if version > FORMAT_VERSION {
            return Err(FormatError::UnsupportedVersion {
                what: WHAT,
                version,
            });
        }
        let len = r.u64()?;
        let mut words = [0u64; 4];
        for word in &mut words {
            *word = r.u64()?;
        }
        if len > CONFIG_SIZE - CONFIG_HEADER_SIZE as u64 {
            return Err(FormatError::Invalid {
                what: WHAT,
                why: "payload length too large",
            });
        }
        let payload = bytes
            .get(CONFIG_HEADER_SIZE..CONFIG_HEADER_SIZE + len as usize)
            .ok_or(FormatError::Truncated { what: WHAT })?;
        if checksum(ChecksumKind::Sha256, payload) != Checksum(words) {
            return Err(FormatError::ChecksumMismatch { what: WHAT });
        }
        PoolConfig::decode(payload)
    }
}
