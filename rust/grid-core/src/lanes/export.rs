//! Walking the store in [`ItemName`] order for syncs: held items (or their names and
//! versions) after a name and before a bound, of the walked lanes, wrapping round; and
//! named items.
//!
//! Held apart from [`super::store`], which takes items in and keeps them, because the
//! order and the forms of a walk are one concern.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::encoding::encode_unsigned;
use super::keys::KeyBook;
use super::names::{export_rank, EXPORT_LANES, LANE_COUNT};
use super::store::{ItemStore, Stored};
use super::{ItemName, Lane};
use crate::identity::auth::FINGERPRINT_LEN;

impl ItemStore {
    /// Encodes the held items of `names` (each at its latest version; names not held are
    /// passed over) into `scratch` one by one and hands each to `emit` as
    /// [`ItemStore::export`] does, until `emit` says the budget is spent.
    pub fn export_named(
        &self,
        names: &[ItemName],
        scratch: &mut Vec<u8>,
        mut emit: impl FnMut(&Arc<str>, &[u8], Option<[u8; FINGERPRINT_LEN]>) -> bool,
    ) {
        let keys = self.origin_keys.as_ref();
        for name in names {
            let Some((origin, _)) = self.origins.get_key_value(&name.origin) else {
                continue;
            };
            let Some(stored) = self.stored(origin, name.lane, &name.key) else {
                continue;
            };
            let Some(held) = &stored.held else {
                continue;
            };
            held.encode(origin, name.lane, &name.key, stored.version, scratch);
            let earlier = keys.and_then(|keys| keys.earlier_fingerprint(origin, held.signer));
            if !emit(origin, scratch, earlier) {
                return;
            }
        }
    }

    /// Every stored name of the `walked` lanes in [`ItemName`] order.
    fn entries(&self, walked: WalkLanes) -> impl Iterator<Item = Entry<'_>> {
        self.origins
            .iter()
            .flat_map(move |(origin, lanes)| lane_entries(origin, lanes, None, walked))
    }

    /// Stored names of the `walked` lanes after `after`, in [`ItemName`] order.
    fn entries_after<'a>(
        &'a self,
        after: &'a ItemName,
        walked: WalkLanes,
    ) -> impl Iterator<Item = Entry<'a>> {
        use std::ops::Bound::{Included, Unbounded};
        self.origins
            .range::<str, _>((Included(&*after.origin), Unbounded))
            .flat_map(move |(origin, lanes)| {
                let from = (origin == &after.origin).then_some((after.lane, &*after.key));
                lane_entries(origin, lanes, from, walked)
            })
    }

    /// Encodes held items (those with payloads) of the `walked` lanes one by one into
    /// `scratch`, in the `form` asked, in [`ItemName`] order starting after `after` (from
    /// the first name when `None`) and wrapping round, and hands each with its origin to
    /// `emit` until `emit` says the budget is spent, or the walk reaches `until`
    /// (exclusive: a bounded walk that gets there is [`ExportEnd::Complete`]). An item
    /// signed by an earlier key of its origin comes with that key's certificate
    /// fingerprint (a sync sends the certificate before it).
    pub fn export(
        &self,
        (after, until): (Option<&ItemName>, Option<&ItemName>),
        walked: WalkLanes,
        form: ExportForm,
        scratch: &mut Vec<u8>,
        mut emit: impl FnMut(&Arc<str>, &[u8], Option<[u8; FINGERPRINT_LEN]>) -> bool,
    ) -> ExportEnd {
        /// Offers the held items of `entries` until `emit` says the budget is spent
        /// (`false`), noting the last one taken in `last`.
        fn offer<'a>(
            (keys, form): (Option<&KeyBook>, ExportForm),
            entries: impl Iterator<Item = Entry<'a>>,
            last: &mut Option<Entry<'a>>,
            scratch: &mut Vec<u8>,
            emit: &mut impl FnMut(&Arc<str>, &[u8], Option<[u8; FINGERPRINT_LEN]>) -> bool,
        ) -> bool {
            for entry in entries {
                let (origin, lane, key, stored) = entry;
                let Some(held) = &stored.held else {
                    continue;
                };
                let earlier = match form {
                    ExportForm::Items => {
                        held.encode(origin, lane, key, stored.version, scratch);
                        keys.and_then(|keys| keys.earlier_fingerprint(origin, held.signer))
                    }
                    ExportForm::Versions => {
                        scratch.clear();
                        encode_unsigned(origin, lane, key, stored.version, &[], scratch);
                        None
                    }
                };
                if !emit(origin, scratch, earlier) {
                    return false;
                }
                *last = Some(entry);
            }
            true
        }
        let mut last: Option<Entry<'_>> = None;
        let stopped = |last: Option<Entry<'_>>, wrapped: bool| ExportEnd::Stopped {
            resume: last
                .map(|(origin, lane, key, _)| ItemName {
                    origin: origin.clone(),
                    lane,
                    key: key.clone(),
                })
                .or_else(|| after.cloned()),
            wrapped,
        };
        let keys = (self.origin_keys.as_ref(), form);
        let short_of = |(origin, lane, key, _): &Entry<'_>| {
            until.map_or(true, |until| until.cmp_to(origin, *lane, key).is_gt())
        };
        let Some(after) = after else {
            let entries = self.entries(walked).take_while(short_of);
            if !offer(keys, entries, &mut last, scratch, &mut emit) {
                return stopped(last, false);
            }
            return ExportEnd::Complete;
        };
        // A bound past `after` is met before the walk wraps; one at or before it, after.
        let met_first = until.is_some_and(|until| until > after);
        let entries = self
            .entries_after(after, walked)
            .take_while(|entry| !met_first || short_of(entry));
        if !offer(keys, entries, &mut last, scratch, &mut emit) {
            return stopped(last, false);
        }
        if met_first {
            return ExportEnd::Complete;
        }
        let before = self
            .entries(walked)
            .take_while(|(origin, lane, key, _)| after.cmp_to(origin, *lane, key).is_ge())
            .take_while(short_of);
        if !offer(keys, before, &mut last, scratch, &mut emit) {
            return stopped(last, true);
        }
        ExportEnd::Complete
    }
}

type Entry<'a> = (&'a Arc<str>, Lane, &'a Arc<str>, &'a Stored);

/// What an export hands for each held item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExportForm {
    /// The item as it came: name, version, payload and the origin's signature.
    Items,
    /// Its name and version alone (`name | version u64`, the item's own first bytes): what
    /// a catch-up's check round compares with its store, a twentieth of the bytes.
    Versions,
}

/// Which lanes a sync walk carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WalkLanes {
    /// Every lane: the walk that brings a store whole.
    All,
    /// What a receiver needs to trust and reach each site (its certificates, gateway and
    /// metadata), none of its records: a few items per site, which a node catching up walks
    /// beside the whole store so that it can verify and probe every site early.
    Heads,
}

impl WalkLanes {
    fn carries(self, lane: Lane) -> bool {
        self == WalkLanes::All || lane != Lane::State
    }
}

/// The names of one origin in [`EXPORT_LANES`] order, those after `(lane, key)` if given,
/// of the `walked` lanes.
fn lane_entries<'a>(
    origin: &'a Arc<str>,
    lanes: &'a [BTreeMap<Arc<str>, Stored>; LANE_COUNT],
    from: Option<(Lane, &'a str)>,
    walked: WalkLanes,
) -> impl Iterator<Item = Entry<'a>> {
    use std::ops::Bound::{Excluded, Unbounded};
    EXPORT_LANES
        .into_iter()
        .filter(move |lane| {
            walked.carries(*lane)
                && from.map_or(true, |(first, _)| export_rank(*lane) >= export_rank(first))
        })
        .flat_map(move |lane| {
            let keys = &lanes[lane as usize];
            let range = match from {
                Some((first, key)) if first == lane => {
                    keys.range::<str, _>((Excluded(key), Unbounded))
                }
                _ => keys.range::<str, _>((Unbounded, Unbounded)),
            };
            range.map(move |(key, stored)| (origin, lane, key, stored))
        })
}

/// How an [`ItemStore::export`] ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExportEnd {
    /// Every held item was offered.
    Complete,
    /// The budget ran out: the next export resumes after `resume` (from the first name when
    /// `None`). `wrapped`: this export went past the last name.
    Stopped {
        resume: Option<ItemName>,
        wrapped: bool,
    },
}
