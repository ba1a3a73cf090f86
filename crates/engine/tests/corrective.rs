//! Corrective receive (`tarn receive -c`) through the engine on simulated devices: data
//! blocks of a snapshot lost beyond raidz1's parity are healed from a replica's stream of
//! the same snapshot, in place, so the head and a later snapshot sharing them read back too,
//! and the next scrub is clean with an empty error list. Refusals change no device byte: a
//! stream of another snapshot, a stream with a flipped byte; a well-framed stream whose data
//! for one block was altered heals the others and never writes that one.
//!
//! Method: two engines stand for two hosts, each with a pool `tank` on its own simulated
//! devices. Host A's object of eight 64 KiB blocks is snapshotted (`tank@one`, then
//! `tank@two` with no change), sent to host B (`tank/replica@one` keeps the GUID); A is
//! exported, columns 0 and 1 of three blocks are rotted (beyond raidz1), A is imported.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use std::sync::Arc;

use common::{
    Host, PLAIN_NOV_22_2026, exported_tank, images, import_tank, scrub_tank, sim_devices,
    write_object,
};
use tarn_base::ObjectId;
use tarn_engine::{
    CreateSpec, Engine, EngineError, ImportOptions, ReceiveSpec, SendSpec, SimProvider, TopLayout,
    check,
};
use tarn_send::{Record, StreamReader, StreamWriter};
use tarn_vdev::RaidzMap;

const DEVICE_SIZE: u64 = 128 << 20;
const ASHIFT: u8 = 12;
const HOST: Host = PLAIN_NOV_22_2026;
const LEN: usize = 512 << 10;
/// The blocks (by index) lost on host A.
const LOST: [u64; 3] = [1, 4, 6];

struct Hosts {
    provider: Arc<SimProvider>,
    a: Engine,
    b: Engine,
    object: ObjectId,
    data: Vec<u8>,
}

fn snapshot(engine: &Engine, name: &str) {
    let command = format!("snapshot {name}");
    engine
        .snapshot(&[name.to_string()], false, &[], &command)
        .unwrap();
}

fn send(engine: &Engine, snapshot: &str) -> Vec<u8> {
    let spec = SendSpec {
        snapshot: snapshot.into(),
        ..SendSpec::default()
    };
    let mut out = Vec::new();
    engine.send(&spec, &mut out, &mut |_| {}).unwrap();
    out
}

fn setup() -> Hosts {
    setup_with(&|at| at.object == at.written && at.level == 0 && LOST.contains(&at.blkid))
}

/// Where a block of host A's object set is, for [`setup_with`].
struct At {
    /// The block's object (0: the object set's dnodes).
    object: u64,
    /// The object the test wrote.
    written: u64,
    level: u8,
    blkid: u64,
}

/// [`setup`], rotting every block of host A's object set that `rot` picks.
fn setup_with(rot: &dyn Fn(&At) -> bool) -> Hosts {
    let provider = Arc::new(SimProvider::new());
    let names = sim_devices(&provider, "d", 0..4, DEVICE_SIZE);
    let spec = CreateSpec {
        ashift: ASHIFT,
        ..CreateSpec::one_top("tank", TopLayout::Raidz(1), names)
    };
    let a = HOST.create_tank(&provider, &spec, &[]);
    let (object, data) = write_object(&a, 64 << 10, 11, LEN);
    snapshot(&a, "tank@one");
    snapshot(&a, "tank@two");
    let other = Arc::new(SimProvider::new());
    let spec = CreateSpec::one_top(
        "tank",
        TopLayout::Disk,
        sim_devices(&other, "b", 0..1, DEVICE_SIZE),
    );
    let b = Host { seed: 77, ..HOST }.create_tank(&other, &spec, &[]);
    let receive = ReceiveSpec {
        target: "tank/replica".into(),
        ..ReceiveSpec::default()
    };
    let stream = send(&a, "tank@one");
    b.receive(&receive, &mut stream.as_slice(), &mut |_| {})
        .unwrap();
    a.export_pool("tank", false).unwrap();
    let (pool, root) = exported_tank(&provider, &HOST);
    let reader = pool.reader();
    let mut blocks = Vec::new();
    tarn_objects::visit_object_set(&reader, &root, &mut |bp, context| {
        let at = At {
            object: context.object.0,
            written: object.0,
            level: context.level,
            blkid: context.blkid,
        };
        if rot(&at) {
            blocks.push(*bp);
        }
    })
    .unwrap();
    drop(reader);
    drop(pool);
    assert!(!blocks.is_empty(), "the blocks to rot exist");
    for bp in &blocks {
        let padded = u64::from(bp.psize).next_multiple_of(1 << ASHIFT);
        for dva in bp.copies() {
            let map = RaidzMap::new(4, 1, ASHIFT, dva.offset, padded);
            for column in [0, 1] {
                let device = provider.get(&format!("/sim/d{}", map.columns[column].child));
                let bytes = map.column_bytes(column) as u64;
                device.unwrap().rot(map.leaf_offset(column), bytes).unwrap();
            }
        }
    }
    let a = HOST.engine(&provider);
    import_tank(&a, &ImportOptions::default()).unwrap();
    Hosts {
        provider,
        a,
        b,
        object,
        data,
    }
}

impl Hosts {
    fn read(&self) -> Result<Vec<u8>, EngineError> {
        let mut buf = vec![0u8; LEN];
        self.a.object_read("tank", self.object, 0, &mut buf)?;
        Ok(buf)
    }

    fn frozen(&self, snapshot: &str) -> Result<Vec<u8>, String> {
        let mut buf = vec![0u8; LEN];
        check::snapshot_read(&self.a, snapshot, self.object, 0, &mut buf)?;
        Ok(buf)
    }

    fn correct(&self, stream: &[u8]) -> Result<tarn_engine::CorrectiveReport, EngineError> {
        let mut input = stream;
        self.a
            .receive_corrective("tank@one", &mut input, &mut |_| {})
    }

    /// `receive -n -c`.
    fn dry_run(&self, stream: &[u8]) -> tarn_engine::CorrectiveReport {
        let mut input = stream;
        self.a
            .receive_corrective_with("tank@one", true, &mut input, &mut |_| {})
            .unwrap()
    }

    fn errors(&self) -> Vec<String> {
        self.a.status("tank").unwrap().errors
    }
}

/// The stream `bytes` with the data of the WRITE record of block `blkid` changed by one
/// byte and framed again (its frame checks and END are right: only the block's checksum
/// can tell).
fn altered(bytes: &[u8], blkid: u64) -> Vec<u8> {
    let mut reader = StreamReader::new(bytes);
    let mut out = Vec::new();
    let mut writer = StreamWriter::new(&mut out);
    while let Some(record) = reader.next_record().unwrap() {
        match record {
            Record::End { .. } => writer.end().unwrap(),
            Record::Write(mut write) if write.offset == blkid * (64 << 10) => {
                write.data[1000] ^= 0x20;
                writer.write(&Record::Write(write)).unwrap();
            }
            record => writer.write(&record).unwrap(),
        }
    }
    writer.flush().unwrap();
    drop(writer);
    out
}

#[test]
fn a_replica_stream_heals_blocks_lost_beyond_parity() {
    let hosts = setup();
    assert!(hosts.read().is_err(), "lost data must not be returned");
    let progress = scrub_tank(&hosts.a, 256 << 10);
    assert!(progress.errors > 0, "{progress:?}");
    let lost = vec![format!("tank:<object {}>", hosts.object.0)];
    assert_eq!(hosts.errors(), lost);
    let good = send(&hosts.b, "tank/replica@one");

    // Refusals before any block: another snapshot's stream, a flipped byte.
    snapshot(&hosts.b, "tank/replica@later");
    let before = images(&hosts.provider);
    let other = hosts
        .correct(&send(&hosts.b, "tank/replica@later"))
        .unwrap_err();
    assert!(
        other
            .to_string()
            .contains("the stream is of snapshot 'tank/replica@later'"),
        "{other}"
    );
    let mut flipped = good.clone();
    let middle = flipped.len() / 2;
    flipped[middle] ^= 1;
    let bad = hosts.correct(&flipped).unwrap_err();
    assert!(bad.to_string().starts_with("invalid stream"), "{bad}");
    assert!(
        images(&hosts.provider) == before,
        "a refusal writes nothing"
    );
    assert!(hosts.read().is_err());

    // A well-framed stream whose data for block 4 is not the block: the others heal.
    let report = hosts.correct(&altered(&good, 4)).unwrap();
    let healed: Vec<u64> = report.healed.iter().map(|f| f.offset >> 16).collect();
    assert_eq!(healed, vec![1, 6], "{report:?}");
    assert_eq!(report.unhealed.len(), 1, "{report:?}");
    assert_eq!(report.unhealed[0].offset, 4 << 16);
    assert!(
        report.unhealed[0].why.contains("does not match"),
        "{report:?}"
    );
    assert!(hosts.read().is_err(), "block 4 is still lost");

    // The replica's own stream heals the last one; everything sharing it reads back.
    let report = hosts.correct(&good).unwrap();
    // The eight blocks of the object and those of the file system's own objects.
    let checked = report.checked;
    assert!(checked >= 8, "{report:?}");
    assert_eq!(report.healed.len(), 1, "{report:?}");
    assert_eq!(report.healed[0].offset, 4 << 16);
    assert!(report.unhealed.is_empty(), "{report:?}");
    assert!(
        hosts.read().unwrap() == hosts.data,
        "the head reads back identical"
    );
    assert!(hosts.frozen("tank@one").unwrap() == hosts.data);
    assert!(hosts.frozen("tank@two").unwrap() == hosts.data);
    assert_eq!(hosts.errors(), lost, "the error log keeps it until a scrub");
    let progress = scrub_tank(&hosts.a, 256 << 10);
    assert_eq!((progress.errors, progress.repaired), (0, 0), "{progress:?}");
    assert!(hosts.errors().is_empty());

    nothing_left_to_heal(&hosts, &good, checked);
}

/// A second pass checks every block and heals none.
fn nothing_left_to_heal(hosts: &Hosts, good: &[u8], checked: u64) {
    let report = hosts.correct(good).unwrap();
    assert_eq!(report.checked, checked, "{report:?}");
    assert!(report.healed.is_empty(), "{report:?}");
    assert!(report.unhealed.is_empty(), "{report:?}");
}

// DESCRIPTION: `receive -n -c` reports the blocks a real run would heal (and one whose
// stream data does not match as not healable) and changes no device byte; the real run
// then heals exactly those.
#[test]
fn a_dry_run_says_what_it_would_heal_and_changes_nothing() {
    let hosts = setup();
    let good = send(&hosts.b, "tank/replica@one");
    let before = images(&hosts.provider);
    let report = hosts.dry_run(&good);
    assert!(report.dry_run);
    let would: Vec<u64> = report.healed.iter().map(|f| f.offset >> 16).collect();
    assert_eq!(would, LOST.to_vec(), "{report:?}");
    assert!(report.unhealed.is_empty(), "{report:?}");
    let report = hosts.dry_run(&altered(&good, 4));
    let would: Vec<u64> = report.healed.iter().map(|f| f.offset >> 16).collect();
    assert_eq!(would, vec![1, 6], "{report:?}");
    assert_eq!(report.unhealed.len(), 1, "{report:?}");
    assert!(
        images(&hosts.provider) == before,
        "a dry run writes nothing"
    );
    assert!(hosts.read().is_err(), "nothing was healed");
    let report = hosts.correct(&good).unwrap();
    let healed: Vec<u64> = report.healed.iter().map(|f| f.offset >> 16).collect();
    assert_eq!(healed, LOST.to_vec(), "{report:?}");
    assert!(hosts.read().unwrap() == hosts.data);
}

// DESCRIPTION: a lost indirect block (every copy) cannot be rebuilt from a stream (it holds
// this pool's block pointers): the corrective receive names it once as metadata that stays
// lost, counts the object's records under it as unchecked, and writes nothing.
#[test]
fn a_lost_indirect_block_is_named_and_stays_lost() {
    let hosts = setup_with(&|at| at.object == at.written && at.level == 1);
    assert!(hosts.read().is_err(), "lost data must not be returned");
    let good = send(&hosts.b, "tank/replica@one");
    let before = images(&hosts.provider);
    let dry = hosts.dry_run(&good);
    assert!(
        images(&hosts.provider) == before,
        "a dry run writes nothing"
    );
    let report = hosts.correct(&good).unwrap();
    assert_eq!(
        (&dry.unhealed, dry.unchecked),
        (&report.unhealed, report.unchecked)
    );
    assert!(report.healed.is_empty(), "{report:?}");
    assert_eq!(report.unhealed.len(), 1, "{report:?}");
    let lost = &report.unhealed[0];
    assert!(lost.metadata, "{report:?}");
    let named = format!("an indirect block of object {} stays lost", hosts.object.0);
    assert!(lost.why.contains(&named), "{report:?}");
    assert!(lost.why.contains("no stream carries"), "{report:?}");
    assert_eq!(
        report.unchecked, 8,
        "the object's eight records: {report:?}"
    );
    assert!(hosts.read().is_err(), "still lost");
}

// DESCRIPTION: a lost dnode block (the one holding the written object, every copy) is named
// once as metadata that stays lost; nothing is healed.
#[test]
fn a_lost_dnode_block_is_named_and_stays_lost() {
    let per_block = tarn_format::objset::DNODES_PER_BLOCK;
    let hosts =
        setup_with(&|at| at.object == 0 && at.level == 0 && at.blkid == at.written / per_block);
    assert!(hosts.read().is_err(), "lost data must not be returned");
    let good = send(&hosts.b, "tank/replica@one");
    let report = hosts.correct(&good).unwrap();
    assert!(report.healed.is_empty(), "{report:?}");
    let lost: Vec<_> = report.unhealed.iter().filter(|f| f.metadata).collect();
    assert_eq!(lost.len(), 1, "{report:?}");
    assert!(lost[0].why.contains("a dnode block"), "{report:?}");
    assert!(report.unchecked >= 8, "{report:?}");
}
