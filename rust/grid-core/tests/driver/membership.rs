//! Membership and items: a cluster forms, notices crashes, leaves and restarts, and carries
//! items to everyone once, newest first, whatever the load.

use super::*;

#[test]
fn five_nodes_form_one_cluster_from_a_single_seed() {
    let (mut c, addrs) = five_node_cluster();
    c.run_for(Duration::from_secs(3));
    assert!(c.all_see_all());
    c.assert_driver_healthy();
    for at in &addrs {
        let ups = c.events[at]
            .iter()
            .filter(|e| matches!(e, Event::MemberUp(_)))
            .count();
        assert_eq!(ups, 4, "{at}");
        assert!(c.nodes[at].stats().syncs_completed + c.nodes[at].stats().syncs_served > 0);
    }
}

#[test]
fn a_crashed_node_is_declared_down_everywhere_within_the_bound() {
    let (mut c, addrs) = five_node_cluster();
    let victim = addrs[3];
    c.crashed.insert(victim);
    let bound = config().detection_bound(5);
    let took = c.run_until(bound, |c| {
        c.live()
            .iter()
            .all(|v| c.state_of(*v, victim).map(|s| s.0) == Some(MemberState::Down))
    });
    assert!(took <= bound, "{took:?} > {bound:?}");
    for at in c.live() {
        assert!(c.events[&at]
            .iter()
            .any(|e| matches!(e, Event::MemberDown(id) if id.socket_addr() == victim)));
    }
    c.assert_driver_healthy();
}

#[test]
fn a_node_that_leaves_is_seen_as_left_not_down() {
    let (mut c, addrs) = five_node_cluster();
    let leaver = addrs[2];
    c.leave(leaver);
    c.run_for(Duration::from_secs(3));
    for at in c.live() {
        assert_eq!(
            c.state_of(at, leaver).unwrap().0,
            MemberState::Left,
            "at {at}"
        );
        let about: Vec<_> = c.events[&at]
            .iter()
            .filter(|e| match e {
                Event::MemberLeft(id) | Event::MemberDown(id) => id.socket_addr() == leaver,
                _ => false,
            })
            .collect();
        assert!(
            matches!(about.as_slice(), [Event::MemberLeft(_)]),
            "{about:?}"
        );
    }
}

#[test]
fn a_restarted_node_is_alive_again_with_a_higher_generation() {
    let (mut c, addrs) = five_node_cluster();
    let victim = addrs[4];
    c.crashed.insert(victim);
    c.run_for(config().detection_bound(5));
    c.add(4, 5000);
    c.join(victim, addrs[0]);
    c.run_until(Duration::from_secs(5), |c| {
        c.live()
            .iter()
            .filter(|v| **v != victim)
            .all(|v| c.state_of(*v, victim) == Some((MemberState::Alive, 5000)))
    });
    assert!(c.events[&addrs[1]].iter().any(|e| matches!(
        e,
        Event::MemberRenamed { previous, current }
            if previous.generation() == 100 && current.generation() == 5000
    )));
    c.run_until(Duration::from_secs(5), Cluster::all_see_all);
}

#[test]
fn a_node_wrongly_declared_down_rejoins_with_the_next_generation() {
    let (mut c, addrs) = five_node_cluster();
    let isolated = addrs[1];
    c.crashed.insert(isolated);
    c.run_for(config().detection_bound(5));
    c.crashed.remove(&isolated);
    c.run_until(Duration::from_secs(20), |c| {
        c.live()
            .iter()
            .filter(|v| **v != isolated)
            .all(|v| matches!(c.state_of(*v, isolated), Some((MemberState::Alive, g)) if g > 100))
    });
    assert_eq!(c.nodes[&isolated].identity().generation(), 101);
}

#[test]
fn items_reach_every_node_once_and_newer_versions_supersede() {
    let (mut c, addrs) = five_node_cluster();
    let origin = addrs[0];
    assert!(c.publish(origin, Lane::State, "provider/a", 1, b"one"));
    assert!(c.publish(origin, Lane::State, "provider/a", 2, b"two"));
    assert!(!c.publish(origin, Lane::State, "provider/a", 2, b"again"));
    assert!(!c.publish(origin, Lane::State, "provider/a", 1, b"older"));
    assert!(c.publish(origin, Lane::Gateway, "provider/a", 1, b"gw"));
    c.run_for(Duration::from_secs(4));
    for at in &addrs[1..] {
        let items = c.items_at(*at);
        let mut names: Vec<_> = items.iter().map(|i| (i.1, i.2.clone(), i.3)).collect();
        let total = names.len();
        names.sort_by_key(|n| (n.0 as u8, n.2));
        names.dedup();
        assert_eq!(names.len(), total, "duplicates at {at}: {items:?}");
        let latest_state = items
            .iter()
            .filter(|i| i.1 == Lane::State)
            .map(|i| i.3)
            .max();
        assert_eq!(latest_state, Some(2));
        assert!(items.iter().any(|i| i.1 == Lane::Gateway && i.4 == b"gw"));
        assert!(items.iter().all(|i| i.0 == "site-0"));
    }
    assert!(c.items_at(origin).is_empty(), "own items are not echoed");
}

#[test]
fn a_late_joiner_learns_items_published_before_it_arrived() {
    let (mut c, addrs) = five_node_cluster();
    for v in 1..=3 {
        c.publish(
            addrs[1],
            Lane::Metadata,
            "region",
            v,
            format!("eu-{v}").as_bytes(),
        );
    }
    c.publish(
        addrs[2],
        Lane::Cert,
        "tls",
        7,
        b"-----BEGIN CERTIFICATE-----",
    );
    // Long after foca stopped retransmitting them.
    c.run_for(Duration::from_secs(10));
    let late = c.add(9, 100);
    c.join(late, addrs[0]);
    // From the seed's answer to the join sync, well before any periodic push/pull.
    c.run_until(config().probe_interval * 2, |c| c.items_at(late).len() == 2);
    let mut items = c.items_at(late);
    items.sort_by_key(|i| i.3);
    assert_eq!(items[0].4, b"eu-3");
    assert_eq!((items[1].1, items[1].3), (Lane::Cert, 7));
}

#[test]
fn a_flood_on_one_lane_does_not_hold_back_another() {
    let (mut c, addrs) = five_node_cluster();
    for v in 1..=500 {
        c.nodes
            .get_mut(&addrs[0])
            .unwrap()
            .publish(Lane::Gateway, &format!("gw-{}", v % 5), v, &[7u8; 200])
            .unwrap();
    }
    c.publish(addrs[0], Lane::State, "provider", 1, b"urgent");
    // One delivery round, no timers: the state item went out ahead of the flood's backlog.
    for at in &addrs[1..] {
        assert!(
            c.items_at(*at).iter().any(|i| i.1 == Lane::State),
            "state item missing at {at}"
        );
    }
    // Only the latest gateway versions remain queued, and foca holds no more.
    let stats = c.nodes[&addrs[0]].stats();
    assert!(stats.relay_queue <= 6, "{stats:?}");
    assert!(
        stats.broadcast_backlog - stats.relay_queue <= 6,
        "{stats:?}"
    );
}

#[test]
fn a_burst_waits_in_the_relay_queue_and_reaches_everyone() {
    let mut c = Cluster::new();
    let addrs = c.add_joined(5, 100);
    c.run_until(Duration::from_secs(5), Cluster::all_see_all);
    let count = 600;
    c.publish_providers(addrs[0], count, &[7u8; 600]);
    let mut queued_max = 0;
    c.run_until(Duration::from_secs(300), |c| {
        for at in &addrs {
            let stats = c.nodes[at].stats();
            // What foca holds stays small whatever waits in the queue.
            assert!(
                stats.broadcast_backlog - stats.relay_queue <= WINDOW_ITEMS,
                "{stats:?}"
            );
            queued_max = queued_max.max(stats.relay_queue);
        }
        addrs[1..].iter().all(|at| c.items_at(*at).len() == count)
    });
    assert!(queued_max > WINDOW_ITEMS, "{queued_max}");
    // Every node made all its transmissions.
    c.run_until(Duration::from_secs(300), |c| {
        addrs
            .iter()
            .all(|at| c.nodes[at].stats().broadcast_backlog == 0)
    });
    c.assert_driver_healthy();
}

#[test]
fn private_keys_are_refused_on_publish_and_dropped_on_receive() {
    let (mut c, addrs) = five_node_cluster();
    let err = c
        .nodes
        .get_mut(&addrs[0])
        .unwrap()
        .publish(Lane::Cert, "tls", 1, b"-----BEGIN PRIVATE KEY-----")
        .unwrap_err();
    assert_eq!(err, PublishError::PrivateKey);

    // A key holder whose build skips the check: a signed sync chunk carrying a cert item
    // with a private key.
    let rogue = c.authority("site-0");
    let sender = c.nodes[&addrs[0]].identity().clone();
    let mut item = vec![6];
    item.extend_from_slice(b"site-0");
    item.push(Lane::Cert as u8);
    item.push(3);
    item.extend_from_slice(b"tls");
    item.extend_from_slice(&1u64.to_be_bytes());
    item.extend_from_slice(b"-----BEGIN EC PRIVATE KEY-----");
    item.extend_from_slice(&[0; 64]);
    let mut body = Vec::new();
    sender.encode(&mut body);
    body.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 1]);
    body.push(2);
    body.extend_from_slice(&(item.len() as u16).to_be_bytes());
    body.extend_from_slice(&item);
    let target = addrs[1];
    let chunk = forge(
        &rogue,
        KIND_SYNC_REQUEST,
        &body,
        1 << 40,
        c.wall_ms(),
        target,
    );
    c.deliver_one(target, &chunk);
    assert!(c.items_at(target).is_empty());
    assert_eq!(c.nodes[&target].stats().item_refusals.private_key, 1);
}

#[test]
fn oversized_items_are_refused_with_a_clear_error() {
    let (mut c, addrs) = five_node_cluster();
    let err = c
        .nodes
        .get_mut(&addrs[0])
        .unwrap()
        .publish(Lane::State, "big", 1, &vec![0u8; 2000])
        .unwrap_err();
    assert!(err.to_string().contains("split"), "{err}");
}

#[test]
fn gossip_foca_holds_already_is_not_handed_to_it() {
    let (mut c, addrs) = five_node_cluster();
    let before = total(&c, |s| s.gossip_entries_known);
    // A restarted node's next life spreads to every member several times over: later
    // copies are ones foca holds already, and what is new still reaches foca.
    c.crashed.insert(addrs[4]);
    c.add(4, 101);
    c.join(addrs[4], addrs[0]);
    c.run_until(Duration::from_secs(10), |c| {
        addrs[..4]
            .iter()
            .all(|at| c.state_of(*at, addrs[4]) == Some((MemberState::Alive, 101)))
            && c.all_see_all()
    });
    c.run_for(config().probe_interval * 10);
    let after = total(&c, |s| s.gossip_entries_known);
    assert!(after > before, "{before} -> {after}");
    c.assert_driver_healthy();
}

/// A foca `Gossip` packet from `from` to `to`, signed as `from`'s site with message number
/// `number`, carrying one entry: `subject` in `state` at `incarnation`.
fn gossip_one(
    c: &mut Cluster,
    number: u64,
    from: SocketAddr,
    to: SocketAddr,
    subject: &NodeId,
    incarnation: u16,
    state: State,
) -> Vec<u8> {
    let sender = c.nodes[&from].identity().clone();
    let mut codec = WireCodec::new(c.interner.clone());
    let header = Header {
        src: sender.clone(),
        src_incarnation: 0,
        dst: c.nodes[&to].identity().clone(),
        message: Message::Gossip,
    };
    let mut body = Vec::new();
    codec.encode_header(&header, &mut body).unwrap();
    body.extend_from_slice(&1u16.to_be_bytes());
    codec
        .encode_member(&Member::new(subject.clone(), incarnation, state), &mut body)
        .unwrap();
    let authority = c.authority(sender.site());
    forge(&authority, KIND_FOCA, &body, number, c.wall_ms(), to)
}

fn held(c: &Cluster, at: SocketAddr, subject: SocketAddr) -> Option<(MemberState, u16)> {
    c.nodes[&at]
        .members()
        .into_iter()
        .find(|m| m.id.socket_addr() == subject)
        .map(|m| (m.state, m.incarnation))
}

#[test]
fn a_suspicion_heard_again_after_its_refutation_is_passed_over() {
    let (mut c, addrs) = five_node_cluster();
    let subject = c.nodes[&addrs[2]].identity().clone();
    let suspicion = |c: &mut Cluster, number| {
        gossip_one(c, number, addrs[1], addrs[0], &subject, 0, State::Suspect)
    };
    // News the first time: the node holds the member suspect, the member hears of it and
    // refutes, and the node takes the refutation.
    let first = suspicion(&mut c, 1 << 50);
    c.deliver_one(addrs[0], &first);
    assert_eq!(
        held(&c, addrs[0], addrs[2]),
        Some((MemberState::Suspect, 0))
    );
    c.run_until(Duration::from_secs(5), |c| {
        held(c, addrs[0], addrs[2]) == Some((MemberState::Alive, 1))
    });
    // The same suspicion again is older than what the node holds: it is taken out before
    // foca, and changes nothing.
    let before = c.nodes[&addrs[0]].stats().gossip_entries_known;
    let again = suspicion(&mut c, (1 << 50) + 1);
    c.deliver_one(addrs[0], &again);
    assert_eq!(c.nodes[&addrs[0]].stats().gossip_entries_known, before + 1);
    assert_eq!(held(&c, addrs[0], addrs[2]), Some((MemberState::Alive, 1)));
    c.run_for(config().probe_interval * 2);
    assert!(c.all_see_all());
    c.assert_driver_healthy();
}

#[test]
fn syncs_between_converged_nodes_apply_nothing_new() {
    let (mut c, addrs) = five_node_cluster();
    c.run_for(config().push_pull_interval * 3);
    assert!(c.all_see_all());
    for at in &addrs {
        let stats = c.nodes[at].stats();
        assert!(stats.syncs_completed + stats.syncs_served > 0, "{stats:?}");
        // Every member entry of a sync from a converged peer is one foca already holds.
        assert!(stats.sync_entries_known > 0, "{stats:?}");
    }
    // What a sync does carry that is new is still applied: a restarted node's peers learn
    // its new life, and the restarted node the whole cluster, through its join sync.
    c.crashed.insert(addrs[4]);
    c.add(4, 101);
    c.join(addrs[4], addrs[0]);
    c.run_until(Duration::from_secs(10), |c| {
        c.state_of(addrs[0], addrs[4]) == Some((MemberState::Alive, 101)) && c.all_see_all()
    });
}

#[test]
fn retransmissions_are_retuned_as_the_cluster_grows() {
    let mut c = Cluster::new();
    let seed = c.add(0, 1);
    assert_eq!(c.nodes[&seed].stats().max_transmissions, 4);
    for i in 1..12 {
        let at = c.add(i, 1);
        c.join(at, seed);
    }
    c.run_until(Duration::from_secs(10), Cluster::all_see_all);
    for node in c.nodes.values() {
        assert_eq!(
            node.stats().max_transmissions,
            8,
            "12 nodes: 4*ceil(log10 13)"
        );
    }
    c.assert_driver_healthy();
}

#[test]
fn a_lone_node_keeps_trying_its_seed() {
    let mut c = Cluster::new();
    let lone = c.add(1, 1);
    let seed_addr = addr(0);
    c.join(lone, seed_addr);
    c.run_for(Duration::from_secs(2));
    // The seed comes up late; the joiner finds it without being told again.
    c.add(0, 1);
    c.run_until(Duration::from_secs(10), Cluster::all_see_all);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn arbitrary_messages_never_panic_or_change_membership(
        messages in proptest::collection::vec(
            (0u8..6, proptest::collection::vec(any::<u8>(), 0..300)), 1..40),
    ) {
        let (mut c, addrs) = five_node_cluster();
        let target = addrs[2];
        let before = c.nodes[&target].members();
        let mut out = Outbox::default();
        let now = c.now;
        for (kind, body) in messages {
            let mut message = vec![kind];
            message.extend_from_slice(&body);
            c.nodes.get_mut(&target).unwrap().handle_datagram(now, &message, &mut out);
        }
        // Random bytes do not decode into identities we know, so nothing we track changed.
        let after = c.nodes[&target].members();
        prop_assert_eq!(before, after);
    }

    #[test]
    fn mutated_real_messages_never_panic(seed in any::<u64>(), flips in 1usize..8) {
        let (mut c, addrs) = five_node_cluster();
        let captured = std::mem::take(&mut c.captured);
        let mut rng = seed;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut out = Outbox::default();
        let now = c.now;
        for _ in 0..200 {
            let mut message = captured[(next() as usize) % captured.len()].clone();
            for _ in 0..flips {
                let i = (next() as usize) % message.len();
                message[i] ^= 1 << (next() % 8);
            }
            if next() % 4 == 0 {
                let cut = (next() as usize) % message.len();
                message.truncate(cut);
            }
            c.nodes.get_mut(&addrs[3]).unwrap().handle_datagram(now, &message, &mut out);
        }
    }
}

#[test]
fn converged_nodes_sync_without_their_members_and_a_view_that_differs_is_mended() {
    let (mut c, addrs) = five_node_cluster();
    let before: Vec<_> = addrs.iter().map(|at| c.nodes[at].stats()).collect();
    c.run_for(config().push_pull_interval * 4);
    for (at, before) in addrs.iter().zip(&before) {
        let after = c.nodes[at].stats();
        // Syncs went on, both ways, and carried no members: the views agreed.
        assert!(after.syncs_completed > before.syncs_completed, "{after:?}");
        assert!(after.syncs_served > before.syncs_served, "{after:?}");
        assert!(
            after.sync_members_left_out > before.sync_members_left_out,
            "{after:?}"
        );
    }
    // A sixth node joins: its view (empty) differs from its seed's, so the seed's answer
    // carries the members, and it learns them all from that one sync, not probe by probe.
    let joiner = c.add(5, 100);
    c.join(joiner, addrs[0]);
    let took = c.run_until(Duration::from_secs(5), Cluster::all_see_all);
    assert!(took <= config().probe_interval * 3, "converged in {took:?}");
    // Every view moved; once they agree again, syncs leave members out again.
    let before: Vec<_> = c.nodes.values().map(|n| n.stats()).collect();
    c.run_for(config().push_pull_interval * 4);
    for (node, before) in c.nodes.values().zip(&before) {
        let after = node.stats();
        assert!(
            after.sync_members_left_out > before.sync_members_left_out,
            "{after:?}"
        );
    }
    c.assert_driver_healthy();
}

#[test]
fn a_node_whose_view_differs_is_sent_the_members_by_its_peers_syncs() {
    let mut c = Cluster::new();
    // Suspicions last long enough that a node cannot find out alone what a sync tells it.
    c.swim.suspicion_timeout = Duration::from_secs(5);
    let addrs = c.add_joined(5, 100);
    c.run_until(Duration::from_secs(5), Cluster::all_see_all);
    let agreed = |c: &Cluster| total(c, |s| s.sync_members_left_out);
    let before = agreed(&c);
    c.run_until(config().push_pull_interval * 4, |c| agreed(c) > before + 5);
    // One node hears nothing about a node that leaves, until every other holds it as left
    // and no gossip of it is left to send: then only a sync can tell it, and only the
    // answers to its own requests (the others' requests to it are lost). Its own view has
    // not moved since it last agreed, so its requests carry no members; its peers' answers
    // must.
    let (behind, leaver) = (addrs[1], addrs[2]);
    c.blocked = Some((behind, b"site-2".to_vec()));
    c.leave(leaver);
    let others: Vec<_> = [0, 3, 4].map(|i| addrs[i]).to_vec();
    c.run_until(Duration::from_secs(3), |c| {
        others.iter().all(|at| {
            c.state_of(*at, leaver)
                .is_some_and(|s| s.0 == MemberState::Left)
                && c.nodes[at].stats().updates_backlog == 0
        })
    });
    assert_eq!(
        c.state_of(behind, leaver).map(|s| s.0),
        Some(MemberState::Alive)
    );
    c.blocked = None;
    c.requests_lost_to = Some(behind);
    c.run_until(config().push_pull_interval * 3, |c| {
        matches!(
            c.state_of(behind, leaver),
            Some((MemberState::Left | MemberState::Down, _))
        )
    });
    // Left, as its peers hold it: not down, as its own probes would have found.
    assert_eq!(
        c.state_of(behind, leaver).map(|s| s.0),
        Some(MemberState::Left)
    );
    c.assert_driver_healthy();
}

#[test]
fn a_node_that_rejoins_under_a_new_identity_agrees_on_views_again() {
    let (mut c, addrs) = five_node_cluster();
    let node = addrs[1];
    // The node refutes a suspicion of itself: its incarnation rises to 1.
    let me = c.nodes[&node].identity().clone();
    let suspicion = gossip_one(&mut c, 1 << 50, addrs[0], node, &me, 0, State::Suspect);
    c.deliver_one(node, &suspicion);
    c.run_until(Duration::from_secs(5), |c| {
        held(c, addrs[0], node) == Some((MemberState::Alive, 1))
    });
    assert_eq!(held(&c, addrs[0], node), Some((MemberState::Alive, 1)));
    // Then it is cut off until declared down, and rejoins under its next generation, whose
    // incarnation foca starts again at 0.
    c.crashed.insert(node);
    c.run_for(config().detection_bound(5));
    c.crashed.remove(&node);
    c.run_until(Duration::from_secs(20), |c| {
        c.all_see_all()
            && c.live()
                .iter()
                .all(|v| *v == node || held(c, *v, node) == Some((MemberState::Alive, 0)))
    });
    assert_eq!(c.nodes[&node].identity().generation(), 101);
    assert!(c.all_see_all());
    // Its view digest holds it at that incarnation too: its syncs leave members out again.
    let before = c.nodes[&node].stats();
    c.run_for(config().push_pull_interval * 4);
    let after = c.nodes[&node].stats();
    assert!(
        after.syncs_completed + after.syncs_served > before.syncs_completed + before.syncs_served,
        "{after:?}"
    );
    assert!(
        after.sync_members_left_out > before.sync_members_left_out,
        "{after:?}"
    );
    c.assert_driver_healthy();
}
