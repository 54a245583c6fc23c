//! The one ordered timer queue of a node.
//!
//! A min-heap on `(deadline, kind order, insertion sequence)`. foca timers that fall due at
//! the same instant (after a stall, say) come out in foca's own `Timer` order, so a probe's
//! `SendIndirectProbe` is always handled before the next `ProbeRandomMember`; Grid's own
//! timers come after foca's at equal deadlines; ties beyond that keep insertion order.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::time::Duration;

use foca::Timer;

use crate::identity::NodeId;

/// What a timer does when it fires.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TimerEvent {
    Foca(Timer<NodeId>),
    /// Start a push/pull sync with a random member.
    PushPull,
    /// Send a repair digest to a random member.
    Repair,
    /// Announce to the seeds again while no member is known.
    JoinRetry,
    /// Sync with a member that came back while this node had forgotten its site's items,
    /// so they come back at once rather than at the next periodic push/pull.
    SyncWith(NodeId),
    /// The answer to this node's sync with this id should have arrived whole.
    SyncAnswerDue(u32),
    /// Ask for the next part of the heads walk ([`crate::driver`]'s `heads`).
    HeadsPart,
    /// Ask for the next part of this stretch walk ([`crate::driver`]'s `stretches`).
    StretchPart(usize),
    /// Declare a member down whose suspicion began with another member's Down claim, if
    /// it is still suspect at this incarnation.
    ConfirmDown {
        member: NodeId,
        incarnation: u16,
    },
    /// Ask the sites whose items wait for their certificate again: an earlier ask was held
    /// back by the answer budget.
    AskForKeys,
    /// Tell a member we suspect so (again), if we still do.
    SuspicionNotice {
        target: NodeId,
        incarnation: u16,
        left: u8,
    },
}

impl TimerEvent {
    fn cmp_kind(&self, other: &TimerEvent) -> Ordering {
        match (self, other) {
            (TimerEvent::Foca(a), TimerEvent::Foca(b)) => a.cmp(b),
            (TimerEvent::Foca(_), _) => Ordering::Less,
            (_, TimerEvent::Foca(_)) => Ordering::Greater,
            _ => Ordering::Equal,
        }
    }
}

struct Scheduled {
    deadline: Duration,
    seq: u64,
    event: TimerEvent,
}

impl Ord for Scheduled {
    fn cmp(&self, other: &Self) -> Ordering {
        // Reversed: BinaryHeap is a max-heap and we want the earliest first.
        other
            .deadline
            .cmp(&self.deadline)
            .then_with(|| other.event.cmp_kind(&self.event))
            .then_with(|| other.seq.cmp(&self.seq))
    }
}

impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Scheduled {}

#[derive(Default)]
pub struct TimerHeap {
    heap: BinaryHeap<Scheduled>,
    seq: u64,
}

impl TimerHeap {
    pub fn push(&mut self, deadline: Duration, event: TimerEvent) {
        self.seq += 1;
        self.heap.push(Scheduled {
            deadline,
            seq: self.seq,
            event,
        });
    }

    /// The earliest timer due at `now` or before, if any.
    pub fn pop_due(&mut self, now: Duration) -> Option<TimerEvent> {
        if self.heap.peek()?.deadline > now {
            return None;
        }
        self.heap.pop().map(|s| s.event)
    }

    pub fn next_deadline(&self) -> Option<Duration> {
        self.heap.peek().map(|s| s.deadline)
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn earliest_deadline_first() {
        let mut heap = TimerHeap::default();
        heap.push(ms(30), TimerEvent::PushPull);
        heap.push(ms(10), TimerEvent::JoinRetry);
        heap.push(ms(20), TimerEvent::Foca(Timer::PeriodicGossip(0)));
        assert_eq!(heap.next_deadline(), Some(ms(10)));
        assert_eq!(heap.pop_due(ms(5)), None);
        assert_eq!(heap.pop_due(ms(100)), Some(TimerEvent::JoinRetry));
        assert_eq!(
            heap.pop_due(ms(100)),
            Some(TimerEvent::Foca(Timer::PeriodicGossip(0)))
        );
        assert_eq!(heap.pop_due(ms(100)), Some(TimerEvent::PushPull));
        assert!(heap.is_empty());
    }

    #[test]
    fn same_deadline_follows_foca_order() {
        let probed = NodeId::placeholder("127.0.0.1:1".parse().unwrap());
        let mut heap = TimerHeap::default();
        // Inserted in the "wrong" order, as happens when a stall makes both due at once.
        heap.push(ms(10), TimerEvent::PushPull);
        heap.push(ms(10), TimerEvent::Foca(Timer::PeriodicAnnounceDown(0)));
        heap.push(ms(10), TimerEvent::Foca(Timer::ProbeRandomMember(0)));
        heap.push(
            ms(10),
            TimerEvent::Foca(Timer::SendIndirectProbe {
                probed_id: probed.clone(),
                token: 0,
            }),
        );
        let order: Vec<_> = std::iter::from_fn(|| heap.pop_due(ms(10))).collect();
        assert_eq!(
            order,
            [
                TimerEvent::Foca(Timer::SendIndirectProbe {
                    probed_id: probed,
                    token: 0
                }),
                TimerEvent::Foca(Timer::ProbeRandomMember(0)),
                TimerEvent::Foca(Timer::PeriodicAnnounceDown(0)),
                TimerEvent::PushPull,
            ]
        );
    }

    #[test]
    fn ties_keep_insertion_order() {
        let mut heap = TimerHeap::default();
        for token in 0..5 {
            heap.push(ms(1), TimerEvent::Foca(Timer::PeriodicGossip(token)));
        }
        let tokens: Vec<_> = std::iter::from_fn(|| heap.pop_due(ms(1)))
            .map(|e| match e {
                TimerEvent::Foca(Timer::PeriodicGossip(t)) => t,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(tokens, [0, 1, 2, 3, 4]);
    }
}
