//! Round trips (proptest), and every cut and flipped byte of a small stream refused at the
//! record where it happens.

use proptest::prelude::*;

use crate::*;

fn begin(from: u64) -> Record {
    Record::Begin(Box::new(Begin {
        features: FEATURE_PROPERTIES,
        from_guid: from,
        to_guid: 77,
        to_txg: 12,
        creation_time: 1_700_000_000,
        objset_kind: 1,
        stream_size: 0,
        chain: 0,
        resume_object: 0,
        resume_offset: 0,
        from_name: if from == 0 {
            String::new()
        } else {
            "p/a@x".into()
        },
        to_name: "p/a@y".into(),
    }))
}

fn object(id: u64, bonus: Vec<u8>) -> Record {
    Record::Object(ObjectRecord {
        object: id,
        object_type: 3,
        bonus_type: 0,
        indirect_shift: 17,
        flags: 0,
        checksum: 0,
        compression: 0,
        data_block_size: 4096,
        maxblkid: 3,
        bonus,
    })
}

fn write(id: u64, offset: u64, fill: u8) -> Record {
    Record::Write(WriteRecord {
        object: id,
        offset,
        logical_size: 4096,
        encoding: Encoding::Raw,
        data: vec![fill; 4096],
    })
}

/// A small substream of every record kind.
fn sample() -> Vec<Record> {
    vec![
        begin(5),
        Record::Property {
            name: "compression".into(),
            value: "lz4".into(),
        },
        object(1, vec![1, 2, 3]),
        write(1, 0, 7),
        Record::Free {
            object: 1,
            offset: 4096,
            length: u64::MAX - 4096,
        },
        Record::FreeObjects { first: 2, count: 5 },
        object(9, vec![]),
        write(9, 8192, 1),
    ]
}

fn encode(records: &[Record]) -> Vec<u8> {
    let mut writer = StreamWriter::new(Vec::new());
    for record in records {
        writer.write(record).unwrap();
    }
    writer.end().unwrap();
    writer.into_inner()
}

fn decode_all(bytes: &[u8]) -> Result<Vec<Record>, StreamError> {
    let mut reader = StreamReader::new(bytes);
    let mut out = Vec::new();
    while let Some(record) = reader.next_record()? {
        out.push(record);
    }
    Ok(out)
}

#[test]
fn a_stream_round_trips_and_sizes_are_exact() {
    let records = sample();
    let bytes = encode(&records);
    let decoded = decode_all(&bytes).unwrap();
    assert_eq!(&decoded[..records.len()], &records[..]);
    assert!(matches!(
        decoded.last(),
        Some(Record::End { records: 8, .. })
    ));
    let sized: u64 =
        records.iter().map(encoded_len).sum::<u64>() + (HEADER_LEN + TRAILER_LEN + END_LEN) as u64;
    assert_eq!(sized, bytes.len() as u64, "I3: encoded_len is exact");
    // Two substreams back to back read as one stream.
    let mut twice = bytes.clone();
    twice.extend_from_slice(&bytes);
    assert_eq!(decode_all(&twice).unwrap().len(), 2 * decoded.len());
}

#[test]
fn every_cut_is_refused_as_truncation() {
    let bytes = encode(&sample());
    for cut in 1..bytes.len() {
        let error = decode_all(&bytes[..cut]).unwrap_err();
        assert!(error.is_truncation(), "cut at {cut}: {error}");
    }
    assert!(
        decode_all(&[]).unwrap().is_empty(),
        "an empty stream has no substream"
    );
}

#[test]
fn every_flipped_byte_is_refused() {
    let bytes = encode(&sample());
    for at in 0..bytes.len() {
        for bit in [0x01u8, 0x80] {
            let mut bad = bytes.clone();
            bad[at] ^= bit;
            let error = decode_all(&bad).expect_err("a flipped bit must be found");
            assert!(!error.to_string().is_empty());
        }
    }
}

#[test]
fn swapped_records_are_refused_at_the_second() {
    let records = sample();
    let bytes = encode(&records);
    let lens: Vec<usize> = records.iter().map(|r| encoded_len(r) as usize).collect();
    let start = lens[0] + lens[1] + lens[2];
    // Records 3 (write) and 4 (free) swapped, each keeping its own sequence number.
    let mut swapped = bytes[..start].to_vec();
    let (a, b) = (start, start + lens[3]);
    swapped.extend_from_slice(&bytes[b..b + lens[4]]);
    swapped.extend_from_slice(&bytes[a..b]);
    swapped.extend_from_slice(&bytes[b + lens[4]..]);
    let error = decode_all(&swapped).unwrap_err();
    assert!(
        matches!(
            error,
            StreamError::Sequence {
                expected: 3,
                found: 4
            }
        ),
        "{error}"
    );
}

#[test]
fn records_renumbered_out_of_order_are_refused_by_the_order_rule() {
    // A hostile sender numbers correctly but sends a later object before an earlier one.
    let mut records = sample();
    records.swap(2, 6);
    records.swap(3, 7);
    let error = decode_all(&encode(&records)).unwrap_err();
    assert!(matches!(error, StreamError::Order { .. }), "{error}");
    let unordered = vec![
        begin(0),
        object(4, vec![]),
        write(4, 8192, 1),
        write(4, 0, 2),
    ];
    let error = decode_all(&encode(&unordered)).unwrap_err();
    assert!(
        matches!(error, StreamError::Order { record: 3, .. }),
        "{error}"
    );
    let stray = vec![begin(0), write(4, 0, 2)];
    assert!(matches!(
        decode_all(&encode(&stray)),
        Err(StreamError::Order { .. })
    ));
}

#[test]
fn absurd_values_are_refused() {
    let mut big = encode(&[begin(0)]);
    // Claim a 4 GiB payload in the first header (fixing its check): refused before reading.
    big[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
    let check = super::frame::tests_header_check(&big[..20]);
    big[20..24].copy_from_slice(&check.to_le_bytes());
    assert!(matches!(
        decode_all(&big),
        Err(StreamError::TooLarge { .. })
    ));
    let unknown = Record::Begin(Box::new(Begin {
        features: 1 << 40,
        ..match begin(0) {
            Record::Begin(b) => *b,
            _ => unreachable!(),
        }
    }));
    let error = decode_all(&encode(&[unknown])).unwrap_err();
    assert!(matches!(error, StreamError::Unsupported { .. }), "{error}");
}

#[test]
fn resume_tokens_round_trip_and_garbage_is_refused() {
    let token = ResumeToken {
        features: FEATURE_COMPRESSED,
        from_guid: 3,
        to_guid: 4,
        object: 99,
        offset: 1 << 20,
        bytes: 12345,
        from_name: "p/a@x".into(),
        to_name: "p/a@y".into(),
    };
    let text = token.encode();
    assert_eq!(ResumeToken::decode(&text).unwrap(), token);
    for at in 2..text.len() {
        let mut bad = text.clone().into_bytes();
        bad[at] = if bad[at] == b'0' { b'1' } else { b'0' };
        let bad = String::from_utf8(bad).unwrap();
        assert!(ResumeToken::decode(&bad).is_err(), "changed at {at}");
    }
    for garbage in ["", "1-", "2-00", "1-zz", "x"] {
        assert!(ResumeToken::decode(garbage).is_err(), "{garbage:?}");
    }
}

fn manifest_begin() -> Record {
    Record::Begin(Box::new(Begin {
        features: FEATURE_REPLICATED | FEATURE_MANIFEST,
        ..match begin(0) {
            Record::Begin(b) => *b,
            _ => unreachable!(),
        }
    }))
}

fn listed(dataset: &str, snapshots: &[(u64, u64, &str)]) -> Record {
    Record::Manifest(Manifest {
        dataset: dataset.into(),
        substreams: 2,
        snapshots: snapshots
            .iter()
            .map(|&(guid, txg, name)| ManifestSnapshot {
                guid,
                txg,
                name: name.into(),
            })
            .collect(),
    })
}

// A manifest substream round trips; MANIFEST records only in it, and only MANIFEST records
// in it; a manifest that resumes or is a clone stream, and each broken invariant of the
// record (module doc of `manifest`), is refused where it stands.
#[test]
fn a_manifest_substream_round_trips_and_its_rules_are_enforced() {
    let records = vec![
        manifest_begin(),
        listed("p/a", &[(5, 10, "x"), (77, 12, "y")]),
        listed("p/a/kid", &[]),
    ];
    let bytes = encode(&records);
    let decoded = decode_all(&bytes).unwrap();
    assert_eq!(&decoded[..3], &records[..]);
    // Followed by an ordinary substream: one stream.
    let mut both = bytes.clone();
    both.extend_from_slice(&encode(&sample()));
    assert_eq!(decode_all(&both).unwrap().len(), 4 + sample().len() + 1);

    let order = |records: Vec<Record>| match decode_all(&encode(&records)) {
        Err(StreamError::Order { record, why, .. }) => (record, why),
        other => panic!("an order error: {other:?}"),
    };
    let stray = vec![begin(0), listed("p/a", &[])];
    assert_eq!(order(stray), (1, "MANIFEST outside a manifest substream"));
    let mixed = vec![manifest_begin(), listed("p/a", &[]), object(1, vec![])];
    assert_eq!(
        order(mixed),
        (2, "a manifest substream holds MANIFEST only")
    );
    for extra in [FEATURE_CLONE, FEATURE_RESUMING] {
        let Record::Begin(mut b) = manifest_begin() else {
            unreachable!()
        };
        b.features |= extra;
        b.from_guid = 3;
        b.from_name = "p/a@w".into();
        b.resume_object = u64::from(extra == FEATURE_RESUMING);
        let error = decode_all(&encode(&[Record::Begin(b)])).unwrap_err();
        assert!(
            error.to_string().contains("resumes or is a clone"),
            "{error}"
        );
    }
    let malformed = [
        listed("p/a", &[(0, 1, "x")]),
        listed("p/a", &[(1, 1, "x@y")]),
        listed("p/a", &[(1, 1, "")]),
        listed("p/a", &[(1, 5, "x"), (2, 5, "y")]),
        listed("p/a@b", &[]),
        listed("", &[]),
    ];
    for record in malformed {
        let error = decode_all(&encode(&[manifest_begin(), record.clone()])).unwrap_err();
        assert!(
            matches!(error, StreamError::Malformed { record: 1, .. }),
            "{record:?}: {error}"
        );
    }
    // A count the payload cannot hold is refused before anything is allocated for it, and
    // a version this build does not read is refused by name.
    let mut payload = Vec::new();
    payload.extend_from_slice(&1u16.to_le_bytes());
    payload.extend_from_slice(&0u16.to_le_bytes());
    payload.extend_from_slice(&u32::MAX.to_le_bytes());
    payload.extend_from_slice(&1u32.to_le_bytes());
    payload.extend_from_slice(&3u16.to_le_bytes());
    payload.extend_from_slice(b"p/a");
    let error = Record::decode_payload(Kind::Manifest, 1, &payload).unwrap_err();
    assert!(error.to_string().contains("count exceeds"), "{error}");
    payload[0] = 2;
    let error = Record::decode_payload(Kind::Manifest, 1, &payload).unwrap_err();
    assert!(error.to_string().contains("version"), "{error}");
}

// A long list splits into records under the bound, in order, and joins back.
#[test]
fn a_long_manifest_splits_under_the_bound() {
    let snapshots: Vec<ManifestSnapshot> = (1..=200_000u64)
        .map(|i| ManifestSnapshot {
            guid: i,
            txg: i,
            name: format!("auto-{i:08}"),
        })
        .collect();
    let parts = Manifest::split("p/a", 3, &snapshots);
    assert!(parts.len() > 1, "{} parts", parts.len());
    let substreams: u32 = parts.iter().map(|p| p.substreams).sum();
    assert_eq!(substreams, 3, "the count once, in the first record");
    for part in &parts {
        let record = Record::Manifest(part.clone());
        assert!(encoded_len(&record) as usize <= MANIFEST_BYTES + HEADER_LEN + TRAILER_LEN);
        assert_eq!(part.dataset, "p/a");
    }
    let joined: Vec<ManifestSnapshot> = parts.into_iter().flat_map(|p| p.snapshots).collect();
    assert_eq!(joined, snapshots);
    assert_eq!(
        Manifest::split("p/a", 1, &[]).len(),
        1,
        "an empty list is one record"
    );
}

/// Substream `i` (from 0) of a chain of `n` (`send -I`): from GUID `10 + i` to `11 + i`,
/// counting `n - i`; `chain` false: the same substream without the chain feature.
fn chain_substream(i: u32, n: u32, chain: bool) -> Vec<u8> {
    let Record::Begin(mut head) = begin(5) else {
        unreachable!()
    };
    head.from_guid = 10 + u64::from(i);
    head.to_guid = 11 + u64::from(i);
    if chain {
        head.features |= FEATURE_CHAIN;
        head.chain = n - i;
    }
    encode(&[Record::Begin(head), object(1, vec![]), write(1, 0, 3)])
}

/// A chain of `n` substreams, the offsets where each ends.
fn chain_of(n: u32) -> (Vec<u8>, Vec<usize>) {
    let (mut bytes, mut ends) = (Vec::new(), Vec::new());
    for i in 0..n {
        bytes.extend(chain_substream(i, n, true));
        ends.push(bytes.len());
    }
    (bytes, ends)
}

// A chain (`send -I`, FEATURE_CHAIN) reads whole, also twice back to back; cut at every
// substream boundary before its last it is a truncation (a shorter stream without the
// bit reads as complete: the negative control), cut anywhere else too.
#[test]
fn a_chain_cut_at_a_substream_boundary_is_a_truncation() {
    let (bytes, ends) = chain_of(4);
    assert_eq!(decode_all(&bytes).unwrap().len(), 4 * 4);
    let mut twice = bytes.clone();
    twice.extend_from_slice(&bytes);
    assert_eq!(decode_all(&twice).unwrap().len(), 8 * 4);
    for (done, &end) in ends[..3].iter().enumerate() {
        let error = decode_all(&bytes[..end]).unwrap_err();
        assert!(
            matches!(error, StreamError::ChainTruncated { received, total: 4 }
                if received as usize == done + 1),
            "cut after {done}: {error}"
        );
        assert!(error.is_truncation(), "{error}");
    }
    for cut in 1..bytes.len() {
        assert!(
            decode_all(&bytes[..cut]).unwrap_err().is_truncation(),
            "cut at {cut}"
        );
    }
    let plain: Vec<u8> = (0..2).flat_map(|i| chain_substream(i, 4, false)).collect();
    assert_eq!(
        decode_all(&plain).unwrap().len(),
        2 * 4,
        "no chain: complete"
    );
}

// A chain's substreams dropped, repeated or swapped, or a substream without the bit inside
// the chain, are refused at the BEGIN where it shows (the order rule of chains).
#[test]
fn a_chain_out_of_order_is_refused_at_the_begin() {
    let parts: Vec<Vec<u8>> = (0..3).map(|i| chain_substream(i, 3, true)).collect();
    let join =
        |order: &[usize]| -> Vec<u8> { order.iter().flat_map(|&i| parts[i].clone()).collect() };
    // [1, 0, 2] starts a chain at its second substream (counting 2): 0 then breaks it.
    for order in [&[0, 2][..], &[0, 0, 1, 2], &[0, 2, 1], &[1, 0, 2]] {
        let error = decode_all(&join(order)).unwrap_err();
        let refused = matches!(error, StreamError::Order { kind: "begin", .. })
            || matches!(error, StreamError::ChainTruncated { .. });
        assert!(refused, "{order:?}: {error}");
    }
    let mut mixed = parts[0].clone();
    mixed.extend(chain_substream(1, 3, false));
    let error = decode_all(&mixed).unwrap_err();
    assert!(matches!(error, StreamError::Order { .. }), "{error}");
}

// The BEGIN rules of a chain: a count and a source, not resuming or replicated, no count
// without the bit.
#[test]
fn a_chain_begin_breaking_its_rules_is_malformed() {
    let Record::Begin(good) = begin(5) else {
        unreachable!()
    };
    let bad = [
        (FEATURE_CHAIN, 0, 5),
        (FEATURE_CHAIN, 2, 0),
        (FEATURE_CHAIN | FEATURE_RESUMING, 2, 5),
        (FEATURE_CHAIN | FEATURE_REPLICATED, 2, 5),
        (0, 2, 5),
    ];
    for (features, chain, from_guid) in bad {
        let head = Begin {
            features: good.features | features,
            chain,
            from_guid,
            from_name: if from_guid == 0 {
                String::new()
            } else {
                good.from_name.clone()
            },
            ..(*good).clone()
        };
        let error = decode_all(&encode(&[Record::Begin(Box::new(head))])).unwrap_err();
        assert!(
            matches!(error, StreamError::Malformed { kind: "begin", .. }),
            "{features:#x} {chain} {from_guid}: {error}"
        );
    }
}

fn arb_name() -> impl Strategy<Value = String> {
    "[a-z/@]{0,40}"
}

fn arb_manifest() -> impl Strategy<Value = Record> {
    (
        "[a-z/]{1,30}",
        proptest::collection::vec("[a-z0-9]{1,20}", 0..20),
    )
        .prop_map(|(dataset, names)| {
            let snapshots = names
                .into_iter()
                .enumerate()
                .map(|(i, name)| ManifestSnapshot {
                    guid: i as u64 + 1,
                    txg: i as u64 * 3 + 1,
                    name,
                })
                .collect();
            Record::Manifest(Manifest {
                dataset,
                substreams: 1,
                snapshots,
            })
        })
}

/// A BEGIN of a full or incremental substream, sized or not.
fn arb_begin() -> impl Strategy<Value = Record> {
    (
        arb_name(),
        arb_name(),
        1u64..u64::MAX,
        proptest::option::of(0..=STREAM_SIZE_MAX),
    )
        .prop_map(|(from, to, guid, size)| {
            let features = FEATURES_KNOWN & !FEATURE_RESUMING & !FEATURE_MANIFEST & !FEATURE_CHAIN;
            Record::Begin(Box::new(Begin {
                features: match size {
                    Some(_) => features,
                    None => features & !FEATURE_STREAM_SIZE,
                },
                from_guid: if from.is_empty() { 0 } else { guid },
                to_guid: guid,
                to_txg: 1,
                creation_time: 2,
                objset_kind: 1,
                stream_size: size.unwrap_or(0),
                chain: 0,
                resume_object: 0,
                resume_offset: 0,
                from_name: from,
                to_name: format!("{to}x"),
            }))
        })
}

fn arb_record() -> impl Strategy<Value = Record> {
    prop_oneof![
        (
            1u64..1000,
            any::<u8>().prop_filter("type", |t| *t != 0),
            0usize..320,
            1u32..64
        )
            .prop_map(|(id, t, bonus, blocks)| {
                Record::Object(ObjectRecord {
                    object: id,
                    object_type: t,
                    bonus_type: 2,
                    indirect_shift: 14,
                    flags: 1,
                    checksum: 0,
                    compression: 2,
                    data_block_size: blocks * 512,
                    maxblkid: u64::from(blocks),
                    bonus: vec![9; bonus],
                })
            }),
        (1u64..1000, 0u64..100, 1u32..16, any::<u8>()).prop_map(|(id, n, blocks, fill)| {
            let size = blocks * 512;
            Record::Write(WriteRecord {
                object: id,
                offset: n * u64::from(size),
                logical_size: size,
                encoding: Encoding::Raw,
                data: vec![fill; size as usize],
            })
        }),
        (1u64..1000, any::<u64>(), 1u64..u64::MAX).prop_map(|(object, offset, length)| {
            Record::Free {
                object,
                offset,
                length,
            }
        }),
        (1u64..1000, 1u64..1000).prop_map(|(first, count)| Record::FreeObjects { first, count }),
        ("[a-z:.]{1,30}", "[ -~]{0,100}")
            .prop_map(|(name, value)| Record::Property { name, value }),
        arb_manifest(),
        arb_begin(),
    ]
}

proptest! {
    #[test]
    fn any_record_round_trips_through_its_frame(record in arb_record(), sequence in 0u64..1000) {
        let mut writer = StreamWriter::new(Vec::new());
        // Frame it at `sequence` by writing through a writer numbered there.
        writer.set_sequence_for_tests(sequence);
        writer.emit_for_tests(&record).unwrap();
        let bytes = writer.into_inner();
        prop_assert_eq!(bytes.len() as u64, encoded_len(&record));
        let (decoded, len) = decode_frame(&bytes, sequence).unwrap();
        prop_assert_eq!(len, bytes.len());
        prop_assert_eq!(decoded, record);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let _ = decode_all(&bytes);
        let _ = decode_frame(&bytes, 0);
        let _ = ResumeToken::decode(&String::from_utf8_lossy(&bytes));
    }
}

/// A sized BEGIN (`FEATURE_STREAM_SIZE`) of `stream_size` bytes, after `begin(from)`.
fn sized_begin(from: u64, stream_size: u64) -> Record {
    let Record::Begin(b) = begin(from) else {
        unreachable!()
    };
    Record::Begin(Box::new(Begin {
        features: b.features | FEATURE_STREAM_SIZE,
        stream_size,
        ..*b
    }))
}

/// Goal: a stream's size rides in its first BEGIN (bytes 57..64, 56 bits) and the reader
/// hands it on: the real length of a two-substream stream, the largest size the field
/// holds, and a size smaller than what arrives (read whole: only a wrong ETA). A stream
/// without the bit announces nothing, and the bytes differ from an unsized stream's only
/// in that BEGIN. Negative control: with the 7 bytes written as zeros (as before the
/// bit), the round trip of the size failed.
#[test]
fn a_stream_size_round_trips_in_the_first_begin() {
    let mut rest = sample();
    rest[0] = begin(0);
    let second = encode(&rest);
    let first_len = encode(&sample()).len() as u64;
    let total = first_len + second.len() as u64;
    for size in [total, STREAM_SIZE_MAX, 1] {
        let mut records = sample();
        records[0] = sized_begin(5, size);
        let mut bytes = encode(&records);
        bytes.extend_from_slice(&second);
        assert_eq!(
            bytes.len() as u64,
            total,
            "the size takes no bytes of its own"
        );
        let mut reader = StreamReader::new(&bytes[..]);
        let Some(Record::Begin(head)) = reader.next_record().unwrap() else {
            panic!("a BEGIN first")
        };
        assert_eq!((head.stream_size, reader.stream_size()), (size, size));
        while reader.next_record().unwrap().is_some() {}
        assert_eq!(reader.bytes(), total, "read whole whatever the size says");
        assert_eq!(
            reader.stream_size(),
            size,
            "only a BEGIN with the bit announces"
        );
    }
    let plain = encode(&sample());
    let mut sized = sample();
    sized[0] = sized_begin(5, first_len);
    let sized = encode(&sized);
    assert_eq!(plain.len(), sized.len());
    // BEGIN itself, and END's running checksum over BEGIN's check.
    let begin_len = encoded_len(&sample()[0]) as usize;
    let end_at = plain.len() - (HEADER_LEN + END_LEN + TRAILER_LEN);
    let differ = (0..plain.len()).filter(|&i| plain[i] != sized[i]);
    assert!(differ.clone().any(|i| i < begin_len));
    assert!(differ.into_iter().all(|i| i < begin_len || i >= end_at));
    let mut reader = StreamReader::new(&plain[..]);
    while reader.next_record().unwrap().is_some() {}
    assert_eq!(
        reader.stream_size(),
        0,
        "an unsized stream announces nothing"
    );
}

/// Goal: without `FEATURE_STREAM_SIZE` BEGIN's bytes 57..64 are reserved and must be 0: a
/// BEGIN with a size there and the bit clear is malformed, while the same bytes with the
/// bit are read. Negative control: without the check in `decode_kind_and_size`, the
/// BEGIN with the bit cleared decoded and this failed.
#[test]
fn a_nonzero_reserved_field_without_the_bit_is_refused() {
    let mut payload = Vec::new();
    sized_begin(0, 0x00ab_cdef_0123_4567).encode_payload(&mut payload);
    assert!(Record::decode_payload(Kind::Begin, 0, &payload).is_ok());
    let features = u64::from_le_bytes(payload[16..24].try_into().unwrap());
    payload[16..24].copy_from_slice(&(features & !FEATURE_STREAM_SIZE).to_le_bytes());
    for at in 57..64 {
        let mut one = payload.clone();
        for (i, byte) in one[57..64].iter_mut().enumerate() {
            *byte = u8::from(57 + i == at);
        }
        let error = Record::decode_payload(Kind::Begin, 0, &one).unwrap_err();
        assert!(
            matches!(error, StreamError::Malformed { kind: "begin", .. }),
            "byte {at}: {error}"
        );
    }
    payload[57..64].fill(0);
    assert!(Record::decode_payload(Kind::Begin, 0, &payload).is_ok());
}
