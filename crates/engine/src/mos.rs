//! The meta object set (MOS): the pool's own metadata, stored as objects like everything
//! else and rooted in the uberblock.
//!
//! ```text
//!  uberblock.root ─► MOS object set
//!                     ├─ object 1: object directory (ZAP)  "props" -> 2, "history" -> 3,
//!                     │                                    "root_dataset" -> 4
//!                     ├─ object 2: pool properties (ZAP, name -> value)
//!                     ├─ object 3: command history (ring of records; header in the bonus)
//!                     ├─ object 4: root dataset node (tarn-dataset: header in the bonus,
//!                     │            children and props ZAPs; created by the dataset tree)
//!                     ├─ "scan"   -> ZAP: the scrub's state, one u64 per field
//!                     └─ "errlog" -> ZAP: blocks found unrecoverable, key -> txg found
//! ```
//! The object numbers of the first four are fixed in format version 1, and the directory
//! names them as well so that later versions can move things without guessing. "scan" and
//! "errlog" are created the first time they are needed; a pool without them never scrubbed.

use tarn_base::{ObjectId, Txg};
use tarn_format::BlockPtr;
use tarn_format::wire::{Reader, TlvReader, TlvWriter, Writer, tlv_str, tlv_u64};
use tarn_objects::{ObjectSet, ObjsetKind};
use tarn_zio::BlockStore;

use crate::EngineError;

const DIRECTORY: ObjectId = ObjectId(1);
const PROPS: ObjectId = ObjectId(2);
const HISTORY: ObjectId = ObjectId(3);
const ROOT_DATASET: ObjectId = ObjectId(4);
/// Directory names of the objects created on demand.
const SCAN: &str = "scan";
const ERRLOG: &str = "errlog";
/// The pool property (in PROPS, read-only to the admin) counting leaked bytes.
pub(crate) const LEAKED: &str = "leaked";

/// Object type tags used in the MOS. Below 16 they are tarn-objects' own (meta-dnode, ZAP,
/// plain); from 16 up they are the engine's.
const TYPE_ZAP: u8 = tarn_format::dnode::OBJECT_TYPE_ZAP;
const TYPE_HISTORY: u8 = 16;

const HISTORY_BLOCK: u32 = 16 << 10;
const HISTORY_HEADER_LEN: u16 = 24;
/// Most history a pool keeps; older records are dropped (ZFS keeps about 1% of the pool,
/// capped at 1 GiB; a fixed 8 MiB is plenty for commands).
pub(crate) const HISTORY_CAPACITY: u64 = 8 << 20;

/// One history record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistoryRecord {
    /// Unix seconds.
    pub time: u64,
    /// The command as typed, or an internal event's description.
    pub command: String,
    /// Internal event (shown with `history -i`).
    pub internal: bool,
    /// User who ran it.
    pub user: String,
    /// Host it ran on.
    pub host: String,
    /// Txg in which it was recorded.
    pub txg: Txg,
}

impl HistoryRecord {
    fn encode(&self) -> Vec<u8> {
        let mut w = TlvWriter::new();
        w.u64(1, self.time);
        w.str(2, &self.command);
        w.u64(3, u64::from(self.internal));
        w.str(4, &self.user);
        w.str(5, &self.host);
        w.u64(6, self.txg.0);
        w.finish()
    }

    fn decode(bytes: &[u8]) -> Result<Self, EngineError> {
        const WHAT: &str = "history record";
        let mut record = HistoryRecord {
            time: 0,
            command: String::new(),
            internal: false,
            user: String::new(),
            host: String::new(),
            txg: Txg(0),
        };
        let mut reader = TlvReader::new(bytes, WHAT);
        let corrupt = |e: tarn_format::FormatError| EngineError::Corrupt(e.to_string());
        while let Some((tag, value)) = reader.next_field().map_err(corrupt)? {
            match tag {
                1 => record.time = tlv_u64(value, WHAT).map_err(corrupt)?,
                2 => record.command = tlv_str(value, WHAT).map_err(corrupt)?,
                3 => record.internal = tlv_u64(value, WHAT).map_err(corrupt)? != 0,
                4 => record.user = tlv_str(value, WHAT).map_err(corrupt)?,
                5 => record.host = tlv_str(value, WHAT).map_err(corrupt)?,
                6 => record.txg = Txg(tlv_u64(value, WHAT).map_err(corrupt)?),
                _ => {}
            }
        }
        Ok(record)
    }
}

/// The history ring's header, kept in the history object's bonus buffer: logical offsets
/// of the oldest and the next record (`start <= end`, `end - start <= capacity`; a logical
/// offset maps to `offset % capacity` in the object).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct HistoryHeader {
    start: u64,
    end: u64,
    capacity: u64,
}

impl HistoryHeader {
    fn encode(self) -> Vec<u8> {
        let mut w = Writer::new();
        w.u64(self.start);
        w.u64(self.end);
        w.u64(self.capacity);
        w.finish()
    }

    fn decode(bytes: &[u8]) -> Result<Self, EngineError> {
        let mut r = Reader::new(bytes, "history header");
        let corrupt = |e: tarn_format::FormatError| EngineError::Corrupt(e.to_string());
        let header = HistoryHeader {
            start: r.u64().map_err(corrupt)?,
            end: r.u64().map_err(corrupt)?,
            capacity: r.u64().map_err(corrupt)?,
        };
        if header.start > header.end
            || header.end - header.start > header.capacity
            || header.capacity == 0
        {
            return Err(EngineError::Corrupt(
                "history header is inconsistent".into(),
            ));
        }
        Ok(header)
    }
}

/// How the MOS writes: every block in three copies (ZFS's pool-wide metadata: the dataset
/// tree, properties, history and scan state are what an import needs), placed on different
/// top-level vdevs or far apart on one (tarn-space).
pub(crate) const MOS_WRITE_CONFIG: tarn_objects::ObjsetWriteConfig =
    tarn_objects::ObjsetWriteConfig {
        checksum: tarn_format::ChecksumKind::Fletcher4,
        compression: tarn_format::CompressSetting::Lz4,
        copies: 3,
        metadata_extra_copies: 0,
        redundant_metadata: tarn_objects::RedundantMetadata::All,
        special_small_blocks: 0,
    };

/// The MOS in memory.
#[derive(Debug)]
pub(crate) struct Mos {
    objset: ObjectSet,
}

impl Mos {
    /// A new, empty MOS for a pool being created (dirty until the first sync). The root
    /// dataset's node (object 4) is named here and made by `datasets::Tree::create`.
    pub(crate) fn create(store: &dyn BlockStore) -> Result<Mos, EngineError> {
        let mut objset = ObjectSet::create(ObjsetKind::Mos);
        objset.set_write_config(MOS_WRITE_CONFIG)?;
        // A fresh object set hands out the lowest free ids, so these land on the fixed ids.
        let directory = objset.zap_create(store, TYPE_ZAP)?;
        let props = objset.zap_create(store, TYPE_ZAP)?;
        assert_eq!(
            (directory, props),
            (DIRECTORY, PROPS),
            "fixed MOS object ids"
        );
        objset.claim_object(
            store,
            HISTORY,
            TYPE_HISTORY,
            HISTORY_BLOCK,
            0,
            HISTORY_HEADER_LEN,
        )?;
        let header = HistoryHeader {
            start: 0,
            end: 0,
            capacity: HISTORY_CAPACITY,
        };
        objset.set_bonus(store, HISTORY, &header.encode())?;
        for (name, id) in [
            ("props", PROPS),
            ("history", HISTORY),
            ("root_dataset", ROOT_DATASET),
        ] {
            objset.zap_update_u64(store, DIRECTORY, name, id.0)?;
        }
        Ok(Mos { objset })
    }

    /// Opens the MOS of an imported pool.
    pub(crate) fn open(store: &dyn BlockStore, root: &BlockPtr) -> Result<Mos, EngineError> {
        let mut objset = ObjectSet::open(store, root)?;
        objset.set_write_config(MOS_WRITE_CONFIG)?;
        for (name, id) in [
            ("props", PROPS),
            ("history", HISTORY),
            ("root_dataset", ROOT_DATASET),
        ] {
            let found = objset.zap_lookup_u64(store, DIRECTORY, name)?;
            if found != Some(id.0) {
                return Err(EngineError::Corrupt(format!(
                    "MOS directory entry '{name}' is missing"
                )));
            }
        }
        Ok(Mos { objset })
    }

    /// Writes every dirty MOS block; returns the MOS root for the uberblock.
    pub(crate) fn sync(&mut self, store: &mut dyn BlockStore) -> Result<BlockPtr, EngineError> {
        Ok(self.objset.sync(store)?)
    }

    /// Bytes waiting for the next sync.
    pub(crate) fn dirty_bytes(&self) -> u64 {
        self.objset.dirty_bytes()
    }

    /// What the next sync writes at most (`admission`).
    pub(crate) fn sync_estimate(&self) -> tarn_objects::SyncEstimate {
        self.objset.sync_estimate()
    }

    /// Every locally set pool property.
    pub(crate) fn props(
        &mut self,
        store: &dyn BlockStore,
    ) -> Result<Vec<(String, String)>, EngineError> {
        let entries = self.objset.zap_list_sorted(store, PROPS)?;
        entries
            .into_iter()
            .map(|(name, value)| {
                String::from_utf8(value)
                    .map(|value| (name, value))
                    .map_err(|_| EngineError::Corrupt("pool property value is not UTF-8".into()))
            })
            .collect()
    }

    /// Sets (or with `None` removes) a pool property.
    pub(crate) fn set_prop(
        &mut self,
        store: &dyn BlockStore,
        name: &str,
        value: Option<&str>,
    ) -> Result<(), EngineError> {
        match value {
            Some(value) => self
                .objset
                .zap_update(store, PROPS, name, value.as_bytes())?,
            None => {
                if self.objset.zap_lookup(store, PROPS, name)?.is_some() {
                    self.objset.zap_remove(store, PROPS, name)?;
                }
            }
        }
        Ok(())
    }

    /// Bytes the destroy of an unavailable dataset left allocated (`leaked`; 0 when none).
    pub(crate) fn leaked(&mut self, store: &dyn BlockStore) -> Result<u64, EngineError> {
        let Some(value) = self.objset.zap_lookup(store, PROPS, LEAKED)? else {
            return Ok(0);
        };
        std::str::from_utf8(&value)
            .ok()
            .and_then(|text| text.parse().ok())
            .ok_or_else(|| EngineError::Corrupt("pool property 'leaked' is not a number".into()))
    }

    /// Sets what [`Mos::leaked`] says (0 removes it).
    pub(crate) fn set_leaked(
        &mut self,
        store: &dyn BlockStore,
        bytes: u64,
    ) -> Result<(), EngineError> {
        let value = (bytes > 0).then(|| bytes.to_string());
        self.set_prop(store, LEAKED, value.as_deref())
    }

    /// Appends a history record, dropping the oldest ones when the ring is full.
    pub(crate) fn append_history(
        &mut self,
        store: &dyn BlockStore,
        record: &HistoryRecord,
    ) -> Result<(), EngineError> {
        let body = record.encode();
        let mut framed = Vec::with_capacity(body.len() + 4);
        framed.extend_from_slice(&(body.len() as u32).to_le_bytes());
        framed.extend_from_slice(&body);
        let mut header = HistoryHeader::decode(&self.objset.bonus(store, HISTORY)?)?;
        let len = framed.len() as u64;
        if len > header.capacity / 4 {
            return Err(EngineError::InvalidArgument(
                "history record is too large".into(),
            ));
        }
        while header.end + len - header.start > header.capacity {
            let mut prefix = [0u8; 4];
            self.ring_read(store, header, header.start, &mut prefix)?;
            header.start += 4 + u64::from(u32::from_le_bytes(prefix));
        }
        self.ring_write(store, header, header.end, &framed)?;
        header.end += len;
        self.objset.set_bonus(store, HISTORY, &header.encode())?;
        Ok(())
    }

    fn ring_write(
        &mut self,
        store: &dyn BlockStore,
        header: HistoryHeader,
        at: u64,
        bytes: &[u8],
    ) -> Result<(), EngineError> {
        let offset = at % header.capacity;
        let first = ((header.capacity - offset) as usize).min(bytes.len());
        self.objset.write(store, HISTORY, offset, &bytes[..first])?;
        if first < bytes.len() {
            self.objset.write(store, HISTORY, 0, &bytes[first..])?;
        }
        Ok(())
    }

    fn ring_read(
        &mut self,
        store: &dyn BlockStore,
        header: HistoryHeader,
        at: u64,
        buf: &mut [u8],
    ) -> Result<(), EngineError> {
        let offset = at % header.capacity;
        let first = ((header.capacity - offset) as usize).min(buf.len());
        self.objset
            .read(store, HISTORY, offset, &mut buf[..first])?;
        if first < buf.len() {
            self.objset.read(store, HISTORY, 0, &mut buf[first..])?;
        }
        Ok(())
    }

    /// Every history record still kept, oldest first.
    pub(crate) fn history(
        &mut self,
        store: &dyn BlockStore,
    ) -> Result<Vec<HistoryRecord>, EngineError> {
        let header = HistoryHeader::decode(&self.objset.bonus(store, HISTORY)?)?;
        let mut records = Vec::new();
        let mut at = header.start;
        while at < header.end {
            let mut prefix = [0u8; 4];
            self.ring_read(store, header, at, &mut prefix)?;
            let len = u64::from(u32::from_le_bytes(prefix));
            if at + 4 + len > header.end {
                return Err(EngineError::Corrupt(
                    "history record runs past the end".into(),
                ));
            }
            let mut body = vec![0u8; len as usize];
            self.ring_read(store, header, at + 4, &mut body)?;
            records.push(HistoryRecord::decode(&body)?);
            at += 4 + len;
        }
        Ok(records)
    }

    /// The object the directory names `name`, if any.
    fn named(
        &mut self,
        store: &dyn BlockStore,
        name: &str,
    ) -> Result<Option<ObjectId>, EngineError> {
        Ok(self
            .objset
            .zap_lookup_u64(store, DIRECTORY, name)?
            .map(ObjectId))
    }

    /// The ZAP object the directory names `name`, created (and named) when missing.
    fn named_zap(&mut self, store: &dyn BlockStore, name: &str) -> Result<ObjectId, EngineError> {
        if let Some(id) = self.named(store, name)? {
            return Ok(id);
        }
        let id = self.objset.zap_create(store, TYPE_ZAP)?;
        self.objset.zap_update_u64(store, DIRECTORY, name, id.0)?;
        Ok(id)
    }

    /// The scan record's fields (name -> value), empty when the pool never scrubbed.
    pub(crate) fn scan_fields(
        &mut self,
        store: &dyn BlockStore,
    ) -> Result<Vec<(String, u64)>, EngineError> {
        let Some(id) = self.named(store, SCAN)? else {
            return Ok(Vec::new());
        };
        self.objset
            .zap_list_sorted(store, id)?
            .into_iter()
            .map(|(name, value)| {
                let bytes = <[u8; 8]>::try_from(value.as_slice()).map_err(|_| {
                    EngineError::Corrupt(format!("scan field '{name}' is not a u64"))
                })?;
                Ok((name, u64::from_le_bytes(bytes)))
            })
            .collect()
    }

    /// Stores the scan record's fields.
    pub(crate) fn set_scan_fields(
        &mut self,
        store: &dyn BlockStore,
        fields: &[(&str, u64)],
    ) -> Result<(), EngineError> {
        let id = self.named_zap(store, SCAN)?;
        for (name, value) in fields {
            self.objset.zap_update_u64(store, id, name, *value)?;
        }
        Ok(())
    }

    /// Records an unrecoverable block under `key`, found during the scan that started in
    /// `txg` (a later scan that finds it again refreshes the txg).
    pub(crate) fn errlog_add(
        &mut self,
        store: &dyn BlockStore,
        key: &str,
        txg: Txg,
    ) -> Result<(), EngineError> {
        let id = self.named_zap(store, ERRLOG)?;
        self.objset.zap_update_u64(store, id, key, txg.0)?;
        Ok(())
    }

    /// Every error-log entry (key, txg of the scan that found it), sorted by key.
    pub(crate) fn errlog(
        &mut self,
        store: &dyn BlockStore,
    ) -> Result<Vec<(String, Txg)>, EngineError> {
        let Some(id) = self.named(store, ERRLOG)? else {
            return Ok(Vec::new());
        };
        self.objset
            .zap_list_sorted(store, id)?
            .into_iter()
            .map(|(key, value)| {
                let bytes = <[u8; 8]>::try_from(value.as_slice()).map_err(|_| {
                    EngineError::Corrupt(format!("error log entry '{key}' is not a u64"))
                })?;
                Ok((key, Txg(u64::from_le_bytes(bytes))))
            })
            .collect()
    }

    /// Drops error-log entries last found before txg `since` (a completed scrub that started
    /// at `since` did not find them again: the block was freed or rewritten).
    pub(crate) fn errlog_prune(
        &mut self,
        store: &dyn BlockStore,
        since: Txg,
    ) -> Result<(), EngineError> {
        let Some(id) = self.named(store, ERRLOG)? else {
            return Ok(());
        };
        for (key, txg) in self.errlog(store)? {
            if txg < since {
                self.objset.zap_remove(store, id, &key)?;
            }
        }
        Ok(())
    }

    /// The MOS object set itself (the dataset tree keeps its nodes here).
    pub(crate) fn objset(&mut self) -> &mut ObjectSet {
        &mut self.objset
    }
}
