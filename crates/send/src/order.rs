//! The order rule of a substream: BEGIN, properties, then objects in ascending id order,
//! each OBJECT followed by its writes and frees in ascending offset order, then END. A
//! receiver that applies records as they come therefore never needs to look back, and the
//! last record it applied names exactly how far it got. A manifest substream (BEGIN with
//! the MANIFEST feature) holds MANIFEST records only, and no other substream holds one.

use crate::StreamError;
use crate::record::Record;

/// Where a substream is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Phase {
    /// Between substreams: only BEGIN may come.
    #[default]
    Between,
    /// After BEGIN: properties or objects.
    Properties,
    /// Among objects.
    Objects,
}

/// The checker of the order rule (module doc).
#[derive(Clone, Debug, Default)]
pub struct Order {
    phase: Phase,
    /// The lowest object id the next OBJECT or FREEOBJECTS may name.
    next_object: u64,
    /// The object whose writes and frees may come: (id, block size, next offset).
    current: Option<(u64, u32, u64)>,
    /// The substream is a manifest (its BEGIN has the MANIFEST feature).
    manifest: bool,
}

impl Order {
    /// Checks that `record` (sequence number `sequence`) may come now, and moves on.
    pub fn check(&mut self, record: &Record, sequence: u64) -> Result<(), StreamError> {
        let kind = record.kind().name();
        let bad = |why| StreamError::Order {
            record: sequence,
            kind,
            why,
        };
        match (self.phase, record) {
            (Phase::Between, Record::Begin(begin)) => {
                *self = Order {
                    phase: Phase::Properties,
                    next_object: 1,
                    current: None,
                    manifest: begin.features & crate::FEATURE_MANIFEST != 0,
                };
            }
            (Phase::Between, _) => return Err(bad("a substream must start with BEGIN")),
            (_, Record::Begin(_)) => return Err(bad("BEGIN inside a substream")),
            (_, Record::End { .. }) => *self = Order::default(),
            (_, Record::Manifest(_)) if !self.manifest => {
                return Err(bad("MANIFEST outside a manifest substream"));
            }
            (_, Record::Manifest(_)) => {}
            _ if self.manifest => return Err(bad("a manifest substream holds MANIFEST only")),
            (Phase::Properties, Record::Property { .. }) => {}
            (_, Record::Property { .. }) => return Err(bad("property after the first object")),
            (_, Record::Object(object)) => {
                if object.object < self.next_object {
                    return Err(bad("object id not above the previous object's"));
                }
                self.phase = Phase::Objects;
                self.current = Some((object.object, object.data_block_size, 0));
                self.next_object = object.object.saturating_add(1);
            }
            (_, Record::FreeObjects { first, count }) => {
                if *first < self.next_object {
                    return Err(bad("freed objects not above the previous object"));
                }
                self.phase = Phase::Objects;
                self.current = None;
                self.next_object = first.saturating_add(*count);
            }
            (_, Record::Write(w)) => {
                let end = w.offset.saturating_add(u64::from(w.logical_size));
                self.data(w.object, w.offset, end, Some(w.logical_size))
                    .map_err(bad)?;
            }
            (
                _,
                Record::Free {
                    object,
                    offset,
                    length,
                },
            ) => {
                let end = offset.saturating_add(*length);
                self.data(*object, *offset, end, None).map_err(bad)?;
            }
        }
        Ok(())
    }

    /// A WRITE (with its block size) or FREE of `[offset, end)` in `object`.
    fn data(
        &mut self,
        object: u64,
        offset: u64,
        end: u64,
        size: Option<u32>,
    ) -> Result<(), &'static str> {
        let Some((current, block, next)) = self.current else {
            return Err("data record without its object");
        };
        if object != current {
            return Err("data record of another object than the last OBJECT's");
        }
        if size.is_some_and(|size| size != block) {
            return Err("write of another size than its object's blocks");
        }
        if offset < next {
            return Err("data record not after the previous write or free");
        }
        self.current = Some((current, block, end));
        Ok(())
    }
}
