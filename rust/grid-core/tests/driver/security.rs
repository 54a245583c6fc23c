//! A peer holding the network key cannot replay, misdirect, forge or take over what is
//! another site's.

use super::*;

#[test]
fn captured_messages_replayed_later_are_refused() {
    let (mut c, addrs) = five_node_cluster();
    c.publish(addrs[1], Lane::State, "p", 1, b"v1");
    c.run_for(Duration::from_secs(1));
    let capture = std::mem::take(&mut c.wire);
    assert!(capture.len() > 100, "{} messages", capture.len());
    let events_before: usize = c.events.values().map(Vec::len).sum();
    let members_before = memberships(&c);

    // Soon after: the senders' replay windows have seen every one of them.
    for (to, message) in &capture {
        c.deliver_one(*to, message);
    }
    let replayed = total(&c, |s| s.session.dropped_replayed);
    assert_eq!(replayed, capture.len() as u64);
    assert_eq!(
        c.events.values().map(Vec::len).sum::<usize>(),
        events_before
    );
    assert_eq!(memberships(&c), members_before);

    // Long after: refused as stale, whatever the windows remember.
    c.run_for(Duration::from_secs(31));
    let stale_before = total(&c, |s| s.session.dropped_stale);
    for (to, message) in &capture {
        c.deliver_one(*to, message);
    }
    assert_eq!(
        total(&c, |s| s.session.dropped_stale) - stale_before,
        capture.len() as u64
    );
    assert!(c.all_see_all());
    assert!(
        c.items_at(addrs[2]).len() == 1,
        "the item was delivered once"
    );
}

#[test]
fn a_message_for_one_node_is_refused_by_another() {
    let (mut c, addrs) = five_node_cluster();
    let (to, message) = c
        .wire
        .iter()
        .find(|(to, _)| *to == addrs[2])
        .cloned()
        .unwrap();
    assert_eq!(to, addrs[2]);
    c.deliver_one(addrs[3], &message);
    assert_eq!(c.nodes[&addrs[3]].stats().session.dropped_misdirected, 1);
}

#[test]
fn a_key_holder_cannot_announce_the_leave_of_another_site() {
    let (mut c, addrs) = five_node_cluster();
    let mallory = c.authority("site-1");
    let victim = c.nodes[&addrs[2]].identity().clone();
    let mut body = Vec::new();
    victim.encode(&mut body);
    for target in [addrs[0], addrs[3]] {
        let leave = forge(&mallory, KIND_LEAVE, &body, 1 << 50, c.wall_ms(), target);
        c.deliver_one(target, &leave);
        assert_eq!(c.nodes[&target].stats().session.dropped_bad_signature, 1);
    }
    c.run_for(Duration::from_secs(2));
    assert!(c.all_see_all());
    assert_eq!(total(&c, |s| s.leave_notices), 0);
}

#[test]
fn an_item_signed_by_another_site_is_refused_and_jams_nothing() {
    let (mut c, addrs) = five_node_cluster();
    let mallory = c.authority("site-1");
    let sender = c.nodes[&addrs[1]].identity().clone();
    // site-2's item at the highest version, signed by site-1.
    let mut item = vec![6];
    item.extend_from_slice(b"site-2");
    item.push(Lane::State as u8);
    item.push(1);
    item.extend_from_slice(b"p");
    item.extend_from_slice(&(u64::MAX - 1).to_be_bytes());
    item.extend_from_slice(b"extra model");
    let signature = mallory.sign(grid_core::identity::auth::ITEM_DOMAIN, &item);
    item.extend_from_slice(&signature);
    let mut body = Vec::new();
    sender.encode(&mut body);
    body.extend_from_slice(&[0, 0, 0, 9, 0, 0, 0, 1, 2]);
    body.extend_from_slice(&(item.len() as u16).to_be_bytes());
    body.extend_from_slice(&item);
    let target = addrs[0];
    let chunk = forge(
        &mallory,
        KIND_SYNC_REQUEST,
        &body,
        1 << 50,
        c.wall_ms(),
        target,
    );
    c.deliver_one(target, &chunk);
    assert_eq!(c.nodes[&target].stats().item_refusals.bad_signature, 1);
    assert!(c.items_at(target).is_empty());
    // site-2's own next version is news everywhere.
    assert!(c.publish(addrs[2], Lane::State, "p", 5, b"real"));
    c.run_for(Duration::from_secs(1));
    for at in [addrs[0], addrs[1], addrs[3], addrs[4]] {
        assert_eq!(
            c.items_at(at),
            vec![(
                "site-2".into(),
                Lane::State,
                "p".into(),
                5,
                b"real".to_vec()
            )]
        );
    }
}

#[test]
fn an_identity_claiming_another_sites_address_takes_nothing_over() {
    let (mut c, addrs) = five_node_cluster();
    let victim = c.nodes[&addrs[2]].identity().clone();
    let mallory = c.authority("site-1");
    let squatter = NodeId::new(Arc::from("site-1"), addrs[2], u64::MAX - 1);
    let mut codec = WireCodec::new(c.interner.clone());
    for target in [addrs[0], addrs[2], addrs[3]] {
        let header = Header {
            src: squatter.clone(),
            src_incarnation: 0,
            dst: NodeId::placeholder(target),
            message: Message::Announce,
        };
        let mut body = Vec::new();
        codec.encode_header(&header, &mut body).unwrap();
        let announce = forge(&mallory, KIND_FOCA, &body, 1 << 50, c.wall_ms(), target);
        c.deliver_one(target, &announce);
    }
    c.run_for(Duration::from_secs(2));
    assert!(c.all_see_all());
    assert_eq!(
        c.nodes[&addrs[2]].identity(),
        &victim,
        "no renewal at the victim"
    );
    for at in c.live() {
        if at != addrs[2] {
            assert_eq!(
                c.state_of(at, addrs[2]),
                Some((MemberState::Alive, victim.generation()))
            );
        }
    }
    assert!(total(&c, |s| s.name_conflicts) >= 2);
}

#[test]
fn gossip_about_identities_nobody_verified_is_not_applied() {
    let (mut c, addrs) = five_node_cluster();
    let mallory = c.authority("site-1");
    let sender = c.nodes[&addrs[1]].identity().clone();
    let target = c.nodes[&addrs[0]].identity().clone();
    let ghost = NodeId::new(Arc::from("site-2"), addr(60), u64::MAX - 1);
    let mut codec = WireCodec::new(c.interner.clone());
    let header = Header {
        src: sender,
        src_incarnation: 0,
        dst: target.clone(),
        message: Message::Gossip,
    };
    let mut body = Vec::new();
    codec.encode_header(&header, &mut body).unwrap();
    body.extend_from_slice(&1u16.to_be_bytes());
    codec
        .encode_member(&Member::new(ghost.clone(), 0, State::Alive), &mut body)
        .unwrap();
    let gossip = forge(&mallory, KIND_FOCA, &body, 1 << 50, c.wall_ms(), addrs[0]);
    c.deliver_one(addrs[0], &gossip);
    assert!(c.nodes[&addrs[0]].stats().members_unverified >= 1);
    assert!(c.nodes[&addrs[0]].members().iter().all(|m| m.id != ghost));
    c.run_for(Duration::from_secs(2));
    assert!(c.all_see_all());
    // The real site-2 was never shadowed.
    assert_eq!(
        c.state_of(addrs[0], addrs[2]).map(|s| s.0),
        Some(MemberState::Alive)
    );
}

#[test]
fn a_second_node_with_a_site_name_in_use_stops_and_the_first_stays() {
    let (mut c, addrs) = five_node_cluster();
    let original = c.nodes[&addrs[0]].identity().clone();
    let twin = c.add_as("site-0", 7, 200);
    c.join(twin, addrs[1]);
    c.run_until(Duration::from_secs(5), |c| c.nodes[&twin].has_yielded());
    assert!(c.events[&twin].iter().any(|e| matches!(
        e,
        Event::NameConflict { other, yielded: true } if *other == original
    )));
    c.run_for(Duration::from_secs(3));
    for at in &addrs[1..] {
        assert_eq!(
            c.state_of(*at, addrs[0]),
            Some((MemberState::Alive, original.generation()))
        );
        assert!(c.nodes[at]
            .members()
            .iter()
            .all(|m| m.id.socket_addr() != twin));
        assert!(!c.events[at]
            .iter()
            .any(|e| matches!(e, Event::MemberDown(id) if *id == original)));
    }
}
