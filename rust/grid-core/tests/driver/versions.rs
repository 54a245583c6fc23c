//! Protocol versions: each pair speaks its highest shared version, and pairs sharing none
//! refuse each other.

use grid_core::wire::Envelope;

use super::*;

fn protocol_of(c: &Cluster, viewer: SocketAddr, target: SocketAddr) -> Option<u8> {
    c.nodes[&viewer]
        .members()
        .into_iter()
        .find(|m| m.id.socket_addr() == target)
        .and_then(|m| m.protocol)
}

fn refusals_at(c: &Cluster, at: SocketAddr) -> Vec<(String, ProtocolRange, ProtocolRange)> {
    c.events[&at]
        .iter()
        .filter_map(|e| match e {
            Event::VersionRefused { peer, theirs, ours } => {
                Some((peer.site().to_string(), *theirs, *ours))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn each_pair_speaks_its_highest_shared_version_and_pairs_sharing_none_refuse_each_other() {
    let range = |min, max| ProtocolRange::new(min, max).unwrap();
    let mut c = Cluster::new();
    let hub = c.add(0, 1);
    let old = c.add(1, 1);
    let next = c.add(2, 1);
    for (at, speaks) in [(hub, range(1, 3)), (old, range(1, 1)), (next, range(2, 3))] {
        c.speaking(at, speaks);
    }
    c.join(old, hub);
    c.join(next, hub);
    c.run_until(Duration::from_secs(5), |c| {
        protocol_of(c, hub, old) == Some(1) && protocol_of(c, hub, next) == Some(3)
    });
    c.run_for(Duration::from_secs(5));
    // The hub speaks with both, each at the highest version the pair shares.
    for (viewer, target, spoken) in [(hub, old, 1), (hub, next, 3), (old, hub, 1), (next, hub, 3)] {
        assert_eq!(
            c.state_of(viewer, target).map(|s| s.0),
            Some(MemberState::Alive)
        );
        assert_eq!(protocol_of(&c, viewer, target), Some(spoken));
    }
    // 1..1 and 2..3 share nothing: neither takes the other in, though the hub gossips
    // each to the other and both kept asking for introductions.
    assert_eq!(c.state_of(old, next), None);
    assert_eq!(c.state_of(next, old), None);
    for at in [old, next] {
        assert!(c.nodes[&at].stats().session.dropped_incompatible_version >= 1);
    }
    // Each refusal is reported once, naming both ranges.
    assert_eq!(
        refusals_at(&c, old),
        vec![("site-2".to_owned(), range(2, 3), range(1, 1))]
    );
    assert_eq!(
        refusals_at(&c, next),
        vec![("site-1".to_owned(), range(1, 1), range(2, 3))]
    );
    assert!(refusals_at(&c, hub).is_empty());
    assert_eq!(
        c.nodes[&hub].stats().session.dropped_incompatible_version,
        0
    );
    // Items still flow both ways through the hub, which both trust.
    c.publish(old, Lane::State, "provider/old", 1, b"from 1..1");
    c.publish(next, Lane::State, "provider/next", 1, b"from 2..3");
    c.run_until(Duration::from_secs(5), |c| {
        holds(c, hub, "provider/old", 1) && holds(c, hub, "provider/next", 1)
    });
}

#[test]
fn a_hello_without_a_range_is_heard_as_protocol_one() {
    let mut c = Cluster::new();
    let a = c.add(0, 1);
    let b = c.add(1, 1);
    // A node that still speaks protocol 1 (this build speaks 2 and 3).
    let driver = c
        .nodes
        .remove(&a)
        .unwrap()
        .with_protocols(ProtocolRange::new(1, 3).unwrap());
    c.nodes.insert(a, driver);
    c.join(b, a);
    c.run_until(Duration::from_secs(5), |c| {
        protocol_of(c, a, b) == Some(3) && protocol_of(c, b, a) == Some(3)
    });
    // A HELLO whose flags carry no range (as release 0.1.0 sends them), signed by b.
    let signer = c.authority("site-1");
    let certificate = c.issued["site-1"].cert.clone();
    let mut body = Vec::new();
    c.nodes[&b].identity().encode(&mut body);
    body.extend_from_slice(&[0x00, 1]);
    body.extend_from_slice(&(certificate.len() as u16).to_be_bytes());
    body.extend_from_slice(&certificate);
    let hello = forge(&signer, KIND_HELLO, &body, 1 << 50, c.wall_ms(), a);
    let before = c.nodes[&a].stats().session.hellos_received;
    c.deliver_one(a, &hello);
    assert_eq!(c.nodes[&a].stats().session.hellos_received, before + 1);
    assert_eq!(protocol_of(&c, a, b), Some(1));
    assert!(c.all_see_all());
}

/// The entry tags of a sync chunk's body (sender identity, id, index, count, entries).
fn sync_entry_tags(body: &[u8], interner: &Interner) -> Vec<u8> {
    let mut r = grid_core::wire::Reader::new(body);
    NodeId::decode(&mut r, interner).unwrap();
    r.bytes(4 + 2 + 2).unwrap();
    let mut tags = Vec::new();
    while !r.is_empty() {
        tags.push(r.u8().unwrap());
        let len = usize::from(r.u16().unwrap());
        r.bytes(len).unwrap();
    }
    tags
}

#[test]
fn a_peer_of_the_previous_protocol_is_sent_members_and_no_view_digest() {
    const ENTRY_MEMBER: u8 = 1;
    const ENTRY_VIEW: u8 = 11;
    let (mut c, _, old) = four_nodes_one_of_protocol_2();
    c.run_for(config().push_pull_interval * 2);
    c.wire.clear();
    c.run_for(config().push_pull_interval * 3);
    let (mut to_old, mut between_new) = (Vec::new(), Vec::new());
    for (to, message) in &c.wire {
        let envelope = Envelope::decode(message, &c.interner).unwrap();
        if envelope.kind != KIND_SYNC_REQUEST && envelope.kind != KIND_SYNC_RESPONSE {
            continue;
        }
        let tags = sync_entry_tags(envelope.body, &c.interner);
        if *to == old {
            to_old.push(tags);
        } else if envelope.sender.socket_addr() != old {
            between_new.push(tags);
        }
    }
    // Syncs went to the old peer, each with members (more than the sender itself) and
    // none with a view digest, which protocol 2 would refuse with the whole chunk.
    assert!(!to_old.is_empty());
    for tags in &to_old {
        assert!(!tags.contains(&ENTRY_VIEW), "{tags:?}");
        let members = tags.iter().filter(|t| **t == ENTRY_MEMBER).count();
        assert!(members >= 2, "{tags:?}");
    }
    // Between nodes of this protocol the digest goes, and agreeing views carry no members
    // but the sender.
    assert!(between_new.iter().any(|tags| tags.contains(&ENTRY_VIEW)));
    assert!(between_new.iter().any(|tags| {
        tags.contains(&ENTRY_VIEW) && tags.iter().filter(|t| **t == ENTRY_MEMBER).count() == 1
    }));
    assert_eq!(c.nodes[&old].stats().bad_messages, 0);
    assert!(c.all_see_all());
}
