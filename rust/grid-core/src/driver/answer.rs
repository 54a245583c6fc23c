//! The answer to a sync of a walk as its chunks arrive, and how far it took the walk:
//! whole, or in part, with the holes between the chunks received.
//!
//! Held apart because it is the walks' shared reading of an answer (the whole walk, the
//! stretch walks and the holes each receive answers), with no driver state.

use crate::identity::{Interner, NodeId};
use crate::lanes::{ExportEnd, ExportForm, ItemName};
use crate::reader::Reader;

use super::carry::WalkSpan;

/// The answer to a sync of a walk, as its chunks arrive. Chunks carry items in walk order,
/// so the chunks received from the first on, without a gap, cover one stretch of the walk;
/// the chunks lost between received ones are the answer's holes.
pub(in crate::driver) struct PullAnswer {
    pub(super) sync_id: u32,
    /// The peer that answers.
    from: Option<NodeId>,
    /// Where the answer was asked to start.
    pub(super) start: Option<ItemName>,
    /// The bound it was asked to stop before, if any: reaching it is where a whole answer
    /// that says it is complete ended.
    until: Option<ItemName>,
    /// The form asked: its holes are asked for in it.
    form: ExportForm,
    chunks: Vec<Option<ChunkItems>>,
    missing: usize,
    end: Option<ExportEnd>,
}

/// The items of one received chunk, by name: its first and last, and whether the walk
/// wrapped (went past the last name and on from the first) within it.
#[derive(Clone, Default)]
pub(super) struct ChunkItems {
    first: Option<ItemName>,
    last: Option<ItemName>,
    wrapped: bool,
}

/// A stretch of the name order whose chunks were lost from an answer: the names after
/// `after` (None: from the first) and before `until`, the first name of the next chunk
/// received, in the form the answer was asked in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Hole {
    pub(super) after: Option<ItemName>,
    pub(super) until: ItemName,
    pub(super) form: ExportForm,
}

/// How far a sync's answer took the walk.
pub(super) enum WalkStep {
    /// Whole: what the answer said (a bounded answer that is complete stopped at its bound).
    Ended(ExportEnd),
    /// Some chunk is missing: resume after this name (None: where the answer started);
    /// `wrapped` if the stretch received went past the last name. Without holes, the
    /// stretch is the chunks received from the first without a gap; with them, every chunk
    /// received, and the holes are to be asked for apart.
    Partial {
        resume: Option<ItemName>,
        wrapped: bool,
        holes: Vec<Hole>,
    },
}

impl PullAnswer {
    pub(super) fn new(sync_id: u32, asked: &WalkSpan, count: u16) -> PullAnswer {
        PullAnswer {
            sync_id,
            from: None,
            start: asked.after.clone(),
            until: asked.until.clone(),
            form: asked.form,
            chunks: vec![None; usize::from(count)],
            missing: usize::from(count),
            end: None,
        }
    }

    /// Notes chunk `index` from `from`; true once every chunk is in.
    pub(super) fn note(
        &mut self,
        (index, from): (u16, &NodeId),
        items: ChunkItems,
        end: Option<ExportEnd>,
    ) -> bool {
        self.from.get_or_insert_with(|| from.clone());
        if let Some(slot) = self.chunks.get_mut(usize::from(index)) {
            if slot.is_none() {
                *slot = Some(items);
                self.missing -= 1;
            }
        }
        if end.is_some() {
            self.end = end;
        }
        self.missing == 0 && self.end.is_some()
    }

    /// The peer that answered, once a chunk came.
    pub(super) fn from(&self) -> Option<&NodeId> {
        self.from.as_ref()
    }

    /// How far the walk got: the answer's own end when it is whole (at its bound if it was
    /// bounded and complete), else the stretch the chunks received cover: those from the
    /// first without a gap, or, `with_holes`, all of them and the holes between.
    pub(super) fn step(&mut self, with_holes: bool) -> WalkStep {
        if self.missing == 0 {
            match (self.end.take(), &self.until) {
                (Some(ExportEnd::Complete), Some(until)) => {
                    let wrapped = self.start.as_ref().is_some_and(|start| until <= start);
                    return WalkStep::Ended(ExportEnd::Stopped {
                        resume: Some(until.clone()),
                        wrapped,
                    });
                }
                (Some(end), _) => return WalkStep::Ended(end),
                (None, _) => {}
            }
        }
        let mut resume = self.start.clone();
        let mut wrapped = false;
        let mut holes = Vec::new();
        let mut gap = false;
        for chunk in &self.chunks {
            let Some(chunk) = chunk else {
                if !with_holes {
                    break;
                }
                gap = true;
                continue;
            };
            let Some(first) = &chunk.first else {
                continue;
            };
            if std::mem::take(&mut gap) {
                holes.push(Hole {
                    after: resume.clone(),
                    until: first.clone(),
                    form: self.form,
                });
            }
            wrapped |= chunk.wrapped || resume.as_ref().is_some_and(|p| first <= p);
            resume = chunk.last.clone();
        }
        WalkStep::Partial {
            resume,
            wrapped,
            holes,
        }
    }
}

impl ChunkItems {
    pub(super) fn of(items: &[&[u8]], interner: &Interner) -> ChunkItems {
        let mut names = items
            .iter()
            .filter_map(|item| ItemName::decode(&mut Reader::new(item), interner).ok());
        let Some(first) = names.next() else {
            return ChunkItems::default();
        };
        let mut last = first.clone();
        let mut wrapped = false;
        for name in names {
            wrapped |= name <= last;
            last = name;
        }
        ChunkItems {
            first: Some(first),
            last: Some(last),
            wrapped,
        }
    }
}
