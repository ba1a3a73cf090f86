//! Property tests for the on-disk encodings: every valid value round-trips (invariant I3), and
//! every decoder turns garbage, truncation and bit flips of valid encodings into an error or
//! a value, never a panic (invariant I2).

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

use proptest::prelude::*;
use tarn_base::{Guid, Txg, VdevId};
use tarn_format::FORMAT_VERSION;
use tarn_format::blkptr::{BLKPTR_SIZE, BlockPtr, BlockType, DVA_ASIZE_UNIT, Dva};
use tarn_format::checksum::{Checksum, ChecksumKind};
use tarn_format::compress::{CompressKind, CompressSetting, compress, decompress};
use tarn_format::label::{
    LABEL_SIZE, PoolConfig, PoolState, VdevKind, VdevTree, data_area, min_device_size,
};
use tarn_format::uberblock::{UBERBLOCK_SIZE, Uberblock};

fn config() -> ProptestConfig {
    // Enough cases to find encoding mistakes while keeping the suite to seconds at opt-level 1.
    ProptestConfig {
        cases: 256,
        ..ProptestConfig::default()
    }
}

fn dva() -> impl Strategy<Value = Dva> {
    (any::<u32>(), any::<u64>(), 1..=u64::from(u32::MAX)).prop_map(|(vdev, offset, sectors)| Dva {
        vdev: VdevId(vdev),
        offset,
        asize: sectors * DVA_ASIZE_UNIT,
    })
}

fn compress_kind() -> impl Strategy<Value = CompressKind> {
    prop_oneof![
        Just(CompressKind::Off),
        Just(CompressKind::Lz4),
        Just(CompressKind::Zstd),
        Just(CompressKind::Zle)
    ]
}

fn checksum_kind() -> impl Strategy<Value = ChecksumKind> {
    prop_oneof![
        Just(ChecksumKind::Off),
        Just(ChecksumKind::Fletcher4),
        Just(ChecksumKind::Sha256),
        Just(ChecksumKind::Blake3)
    ]
}

fn block_type() -> impl Strategy<Value = BlockType> {
    (0u8..=7).prop_map(|value| BlockType::from_u8(value).expect("0..=7 are block types"))
}

/// A structurally valid block pointer with 1..=3 copies (what `decode` accepts).
fn data_block_ptr() -> impl Strategy<Value = BlockPtr> {
    let max = tarn_base::limits::BLOCK_SIZE_MAX as u32;
    (
        prop::collection::vec(dva(), 1..=3),
        (1..=max).prop_flat_map(|lsize| (Just(lsize), 1..=lsize)),
        compress_kind(),
        checksum_kind(),
        block_type(),
        0..=tarn_base::limits::INDIRECTION_LEVELS_MAX as u8,
        any::<u64>(),
        any::<u64>(),
        any::<[u64; 4]>(),
    )
        .prop_map(
            |(copies, (lsize, psize), compression, kind, block_type, level, birth, fill, sum)| {
                let mut dvas = [Dva::default(); 3];
                for (slot, copy) in dvas.iter_mut().zip(copies) {
                    *slot = copy;
                }
                BlockPtr {
                    dvas,
                    lsize,
                    psize,
                    compression,
                    checksum_kind: kind,
                    block_type,
                    level,
                    birth: Txg(birth),
                    birth_physical: Txg(0),
                    fill,
                    checksum: Checksum(sum),
                }
            },
        )
}

/// Holes (no copies) with any birth, or data pointers.
fn block_ptr() -> impl Strategy<Value = BlockPtr> {
    prop_oneof![
        any::<u64>().prop_map(|birth| BlockPtr::hole(Txg(birth))),
        data_block_ptr()
    ]
}

fn uberblock() -> impl Strategy<Value = Uberblock> {
    (
        0..=FORMAT_VERSION,
        any::<[u64; 4]>(),
        (block_ptr(), block_ptr()),
        any::<[u64; 3]>(),
    )
        .prop_map(
            |(version, [txg, guid_sum, timestamp, pool_guid], (root, space_log), mmp)| Uberblock {
                version,
                txg: Txg(txg),
                guid_sum,
                timestamp,
                pool_guid: Guid(pool_guid),
                root,
                space_log,
                hostid: mmp[0],
                mmp_sequence: mmp[1],
                mmp_interval_ms: mmp[2],
            },
        )
}

fn vdev_kind() -> impl Strategy<Value = VdevKind> {
    prop_oneof![
        Just(VdevKind::Root),
        Just(VdevKind::Disk),
        Just(VdevKind::Mirror),
        (1u8..=3).prop_map(|parity| VdevKind::Raidz { parity }),
        (1u8..=3, 1u8..=255, 0u8..=255, any::<u64>()).prop_map(|(parity, data, spares, seed)| {
            VdevKind::Draid(tarn_format::label::DraidConfig {
                parity,
                data,
                spares,
                seed,
            })
        }),
        Just(VdevKind::Spares),
        Just(VdevKind::Replacing),
        Just(VdevKind::SpareInUse),
        Just(VdevKind::DraidSpare),
    ]
}

fn vdev_leaf() -> impl Strategy<Value = VdevTree> {
    (
        vdev_kind(),
        1..=u64::MAX,
        any::<u32>(),
        // Valid ashifts only: decode refuses others (they would break slot arithmetic).
        prop_oneof![Just(0u8), 9u8..=16],
        any::<u64>(),
        prop_oneof![Just(0u8), 16u8..=40],
        ".{0,40}",
    )
        .prop_flat_map(|(kind, guid, id, ashift, asize, metaslab_shift, path)| {
            any::<(bool, bool, bool, bool)>().prop_map(
                move |(offline, resilvering, log, special)| VdevTree {
                    kind,
                    guid: Guid(guid),
                    id,
                    ashift,
                    asize,
                    metaslab_shift,
                    path: path.clone(),
                    children: Vec::new(),
                    offline,
                    resilvering,
                    log,
                    special,
                },
            )
        })
}

/// Trees up to four levels deep (the decoder accepts up to seven), with up to four children.
fn vdev_tree() -> impl Strategy<Value = VdevTree> {
    vdev_leaf().prop_recursive(3, 32, 4, |inner| {
        (vdev_leaf(), prop::collection::vec(inner, 0..4)).prop_map(|(mut node, children)| {
            node.children = children;
            node
        })
    })
}

fn pool_state() -> impl Strategy<Value = PoolState> {
    prop_oneof![
        Just(PoolState::Active),
        Just(PoolState::Exported),
        Just(PoolState::Destroyed),
        Just(PoolState::Spare)
    ]
}

fn pool_config() -> impl Strategy<Value = PoolConfig> {
    (
        (any::<u64>(), ".{0,64}", 0..=u64::MAX, any::<u64>()),
        (
            pool_state(),
            any::<u64>(),
            ".{0,64}",
            any::<u64>(),
            any::<u64>(),
        ),
        vdev_tree(),
        prop::collection::vec("[a-z.:_]{1,30}", 0..5),
        prop::collection::vec("[a-z.:_]{1,30}", 0..5),
    )
        .prop_map(
            |(
                (version, name, pool_guid, txg),
                (state, hostid, hostname, this_guid, top_guid),
                vdev_tree,
                features_for_read,
                features_for_write,
            )| PoolConfig {
                version,
                name,
                pool_guid: Guid(pool_guid),
                txg: Txg(txg),
                state,
                hostid,
                hostname,
                this_guid: Guid(this_guid),
                top_guid: Guid(top_guid),
                vdev_tree,
                features_for_read,
                features_for_write,
            },
        )
}

/// A valid encoding with one bit flipped at `bit` (taken modulo the length).
fn flip(mut bytes: Vec<u8>, bit: usize) -> Vec<u8> {
    if !bytes.is_empty() {
        let bit = bit % (bytes.len() * 8);
        bytes[bit / 8] ^= 1 << (bit % 8);
    }
    bytes
}

proptest! {
    #![proptest_config(config())]

    /// `min_device_size` is the exact inverse of `data_area`: a device that size holds the
    /// leaf, and one label's worth smaller does not.
    #[test]
    fn min_device_size_inverts_data_area(asize in 1u64..(1 << 44)) {
        let size = min_device_size(asize);
        let area = |size| data_area(size).map_or(0, |(start, end)| end - start);
        prop_assert!(area(size) >= asize);
        prop_assert!(area(size - LABEL_SIZE) < asize);
    }

    #[test]
    fn block_ptr_round_trips(bp in block_ptr()) {
        let bytes = bp.encode();
        prop_assert_eq!(bytes.len(), BLKPTR_SIZE);
        prop_assert_eq!(BlockPtr::decode_bytes(&bytes).expect("valid pointer decodes"), bp);
    }

    #[test]
    fn uberblock_round_trips(ub in uberblock()) {
        let bytes = ub.encode();
        prop_assert_eq!(bytes.len(), UBERBLOCK_SIZE);
        prop_assert_eq!(Uberblock::decode(&bytes).expect("valid uberblock decodes"), ub);
    }

    #[test]
    fn vdev_tree_round_trips(tree in vdev_tree()) {
        prop_assert_eq!(VdevTree::decode(&tree.encode()).expect("valid tree decodes"), tree);
    }

    #[test]
    fn pool_config_region_round_trips(config in pool_config()) {
        let region = config.encode_region().expect("small config fits");
        prop_assert_eq!(region.len() as u64, tarn_format::label::CONFIG_SIZE);
        prop_assert_eq!(PoolConfig::decode_region(&region).expect("valid region decodes"), config);
    }

    /// Self-checksummed structures: any single bit flip in the checksummed part is detected.
    #[test]
    fn uberblock_bit_flip_is_detected(ub in uberblock(), bit in 0usize..UBERBLOCK_SIZE * 8) {
        let damaged = flip(ub.encode(), bit);
        prop_assert!(Uberblock::decode(&damaged).is_err());
    }

    /// The config header's magic, length and checksum and the whole payload are covered;
    /// the header's version word (bytes 8..16) and its padding (56..64) are not (see
    /// `config_header_version_and_padding_are_not_checksummed`).
    #[test]
    fn config_region_bit_flip_is_detected(config in pool_config(), bit in any::<usize>()) {
        let region = config.encode_region().expect("fits");
        let covered: Vec<usize> =
            (0..8).chain(16..56).chain(64..64 + config.encode().len()).collect();
        let byte = covered[bit % covered.len()];
        let damaged = flip(region, byte * 8 + bit % 8);
        prop_assert!(PoolConfig::decode_region(&damaged).is_err(), "byte {}", byte);
    }

    /// Block pointers carry no checksum of their own (the parent's checksum covers them): a
    /// flipped bit may decode to another valid pointer, but never panics.
    #[test]
    fn block_ptr_bit_flips_never_panic(bp in block_ptr(), bit in any::<usize>()) {
        let _ = BlockPtr::decode_bytes(&flip(bp.encode().to_vec(), bit));
    }

    #[test]
    fn vdev_tree_bit_flips_never_panic(tree in vdev_tree(), bit in any::<usize>()) {
        let _ = VdevTree::decode(&flip(tree.encode(), bit));
    }

    #[test]
    fn pool_config_payload_bit_flips_never_panic(config in pool_config(), bit in any::<usize>()) {
        let _ = PoolConfig::decode(&flip(config.encode(), bit));
    }

    #[test]
    fn garbage_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
        let _ = BlockPtr::decode_bytes(&bytes);
        let _ = Uberblock::decode(&bytes);
        let _ = PoolConfig::decode_region(&bytes);
        let _ = PoolConfig::decode(&bytes);
        let _ = VdevTree::decode(&bytes);
    }

    /// Truncations of valid encodings are errors (or, for TLV lists cut at a field boundary,
    /// a shorter list), never panics.
    #[test]
    fn truncations_never_panic(ub in uberblock(), config in pool_config(), cut in any::<usize>()) {
        let bytes = ub.encode();
        prop_assert!(Uberblock::decode(&bytes[..cut % bytes.len()]).is_err());
        let bp = ub.root.encode();
        prop_assert!(BlockPtr::decode_bytes(&bp[..cut % bp.len()]).is_err());
        let region = config.encode_region().expect("fits");
        let _ = PoolConfig::decode_region(&region[..cut % region.len()]);
        let payload = config.vdev_tree.encode();
        let _ = VdevTree::decode(&payload[..cut % payload.len()]);
    }

    #[test]
    fn decompress_garbage_never_panics(
        bytes in prop::collection::vec(any::<u8>(), 0..1024),
        logical in 0usize..70_000,
    ) {
        for kind in [CompressKind::Off, CompressKind::Lz4, CompressKind::Zstd, CompressKind::Zle] {
            if let Ok(out) = decompress(kind, &bytes, logical) {
                prop_assert_eq!(out.len(), logical);
            }
        }
    }

    /// Compressed blocks round-trip, and bit flips in them decode to an error or to some
    /// block of the right size (the block checksum, not the codec, catches damage).
    #[test]
    fn compressed_blocks_round_trip_and_survive_flips(
        seed in any::<u64>(),
        len in 1usize..20_000,
        zero_percent in 0u64..100,
        bit in any::<usize>(),
    ) {
        let mut rng = tarn_base::SeededRng::new(seed);
        let mut byte = || if rng.below(100) < zero_percent { 0 } else { rng.below(4) as u8 + 1 };
        let data: Vec<u8> = (0..len).map(|_| byte()).collect();
        for setting in [CompressSetting::Lz4, CompressSetting::Zstd(1), CompressSetting::Zle] {
            let Some(compressed) = compress(setting, &data) else { continue };
            prop_assert!(compressed.len() <= tarn_format::compress::compressed_size_limit(len));
            let back = decompress(setting.kind(), &compressed, len).expect("round trip");
            prop_assert_eq!(&back, &data);
            if let Ok(out) = decompress(setting.kind(), &flip(compressed, bit), len) {
                prop_assert_eq!(out.len(), len);
            }
        }
    }
}

/// Goal: record today's behaviour of the config header. Its version word and padding are
/// outside the sha256 (which covers the payload only), so a flip there that does not raise the
/// version is accepted. This is harmless for the decoded value (the payload carries its own
/// version field, which is covered) but means the header version is advisory.
#[test]
fn config_header_version_and_padding_are_not_checksummed() {
    let tree = VdevTree {
        kind: VdevKind::Disk,
        guid: Guid(7),
        id: 0,
        ashift: 12,
        asize: 1 << 30,
        metaslab_shift: 0,
        path: "/dev/sda".into(),
        children: Vec::new(),
        offline: false,
        resilvering: false,
        log: false,
        special: false,
    };
    let config = PoolConfig {
        version: FORMAT_VERSION,
        name: "tank".into(),
        pool_guid: Guid(1),
        txg: Txg(4),
        state: PoolState::Active,
        hostid: 0,
        hostname: "host".into(),
        this_guid: Guid(7),
        top_guid: Guid(7),
        vdev_tree: tree,
        features_for_read: Vec::new(),
        features_for_write: Vec::new(),
    };
    let region = config.encode_region().expect("fits");
    let version_low_bit = flip(region.clone(), 8 * 8);
    assert_eq!(
        PoolConfig::decode_region(&version_low_bit).expect("accepted"),
        config
    );
    let padding = flip(region.clone(), 60 * 8);
    assert_eq!(
        PoolConfig::decode_region(&padding).expect("accepted"),
        config
    );
    let version_high_bit = flip(region, 8 * 8 + 3);
    assert!(
        PoolConfig::decode_region(&version_high_bit).is_err(),
        "version 9 is refused"
    );
}
