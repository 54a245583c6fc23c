//! The item store across time: sites forgotten and back, joiners walking large stores part
//! after part, the store's bound, and repair of versions gossip never brought.

use super::*;

#[test]
fn a_site_forgotten_while_away_comes_back_with_its_items() {
    let (mut c, addrs) = five_node_cluster();
    let paused = addrs[3];
    let item = [(Lane::State, "provider".to_owned())];
    assert!(c.publish(paused, Lane::State, "provider", 4, b"gpu"));
    c.run_for(Duration::from_secs(1));
    assert_eq!(c.items_at(addrs[0]).len(), 1);
    // Paused (no input, no timers) until everyone declared it down.
    c.crashed.insert(paused);
    c.run_until(config().detection_bound(5), |c| {
        c.live()
            .iter()
            .all(|v| c.state_of(*v, paused).map(|s| s.0) == Some(MemberState::Down))
    });
    // Going down forgets nothing: syncs still carry its item...
    assert_eq!(c.nodes[&addrs[0]].stats().items_stored, 1);
    // ...until the hosts decide its records are stale.
    for at in [addrs[0], addrs[1], addrs[2]] {
        assert_eq!(c.nodes.get_mut(&at).unwrap().forget("site-3", &item), 1);
    }
    // A host that has not forgotten it yet cannot bring it back while the site is down.
    c.run_for(Duration::from_secs(6));
    assert_eq!(c.items_at(addrs[0]).len(), 1);
    c.crashed.remove(&paused);
    // Resumed: its unchanged item, at the same version, is delivered again where forgotten.
    c.run_until(Duration::from_secs(10), |c| {
        [addrs[0], addrs[1], addrs[2]]
            .iter()
            .all(|at| c.items_at(*at).len() == 2)
    });
    for at in [addrs[0], addrs[1], addrs[2]] {
        let items = c.items_at(at);
        assert_eq!(items[0], items[1], "{at}");
    }
    assert_eq!(
        c.items_at(addrs[4]).len(),
        1,
        "a node that forgot nothing gets nothing twice"
    );
    assert!(c.all_see_all());
}

#[test]
fn a_site_forgotten_while_away_is_not_asked_for_again_by_push_pull() {
    let (mut c, addrs) = five_node_cluster();
    c.swim.push_pull_interval = Duration::from_secs(5);
    let (host, away) = (addrs[0], addrs[3]);
    let count = 100;
    c.publish_providers(away, count, b"catalogue");
    c.run_until(Duration::from_secs(5), |c| c.items_at(host).len() == count);
    c.crashed.insert(away);
    c.run_until(config().detection_bound(5), |c| {
        c.state_of(host, away).map(|s| s.0) == Some(MemberState::Down)
    });
    // Only this host forgets the site's records; its peers still hold them, and their
    // push/pull answers list them.
    let records: Vec<_> = (0..count)
        .map(|k| (Lane::State, format!("provider/{k:05}")))
        .collect();
    let host_driver = c.nodes.get_mut(&host).unwrap();
    assert_eq!(host_driver.forget("site-3", &records), count);
    let before = host_driver.stats();
    c.run_for(c.swim.push_pull_interval * 8);
    let after = c.nodes[&host].stats();
    assert!(
        after.syncs_completed > before.syncs_completed + 3,
        "{after:?}"
    );
    assert_eq!(after.hole_syncs, before.hole_syncs, "{after:?}");
    assert_eq!(after.catch_up_syncs, before.catch_up_syncs, "{after:?}");
    assert_eq!(c.items_at(host).len(), count, "nothing forgotten came back");
}

#[test]
fn items_the_host_forgets_are_delivered_again_when_they_come_back() {
    let (mut c, addrs) = five_node_cluster();
    assert!(c.publish(addrs[1], Lane::Gateway, "egress", 2, b"10.0.0.1"));
    c.run_for(Duration::from_secs(1));
    assert_eq!(c.items_at(addrs[0]).len(), 1);
    let forgotten = c
        .nodes
        .get_mut(&addrs[0])
        .unwrap()
        .forget("site-1", &[(Lane::Gateway, "egress".to_owned())]);
    assert_eq!(forgotten, 1);
    // site-1 is alive: the next sync that carries it (a periodic push/pull) brings it back.
    c.run_until(Duration::from_secs(20), |c| c.items_at(addrs[0]).len() == 2);
}

#[test]
fn a_late_joiner_receives_what_a_crashed_site_published() {
    let (mut c, addrs) = five_node_cluster();
    let crashed = addrs[4];
    assert!(c.publish(crashed, Lane::State, "budget/slot", 3, b"71 units"));
    c.run_for(Duration::from_secs(1));
    c.crashed.insert(crashed);
    c.run_until(config().detection_bound(5), |c| {
        c.live()
            .iter()
            .all(|v| c.state_of(*v, crashed).map(|s| s.0) == Some(MemberState::Down))
    });
    let late = c.add(9, 100);
    c.join(late, addrs[0]);
    c.run_until(config().probe_interval * 4, |c| {
        c.items_at(late)
            .iter()
            .any(|item| item.0 == "site-4" && item.4 == b"71 units")
    });
}

/// Bytes of items one sync answer carries at least: half its chunks (members may fill the
/// other half), each nearly full.
pub(crate) fn part_bytes() -> usize {
    MAX_SYNC_CHUNKS / 2 * (MAX_UNSEALED_LEN - 300)
}

#[test]
fn a_joiner_walks_a_store_larger_than_one_sync_part_after_part() {
    let mut c = Cluster::new();
    // Push/pull far beyond the bound: only catching up can bring the store in time.
    c.swim.push_pull_interval = Duration::from_secs(600);
    let addrs: Vec<_> = (0..3).map(|i| c.add(i, 100)).collect();
    let payload = [7u8; 900];
    let count = 1_200;
    c.publish_providers(addrs[0], count, &payload);
    let stored_bytes = count * (payload.len() + 100);
    let parts = stored_bytes.div_ceil(part_bytes());
    assert!(parts >= 3, "the store spans several syncs ({parts})");
    let bound = CATCH_UP_PAUSE * (parts as u32 + 2);
    assert!(bound * 4 < c.swim.push_pull_interval);

    let holds_all = |c: &Cluster, at: SocketAddr| c.items_at(at).len() == count;
    for at in &addrs[1..] {
        c.join(*at, addrs[0]);
    }
    c.run_until(bound, |c| addrs[1..].iter().all(|at| holds_all(c, *at)));
    // A late joiner asks another member than the origin: the walk is the same.
    let late = c.add(9, 100);
    c.join(late, addrs[2]);
    let took = c.run_until(bound, |c| holds_all(c, late));
    // A second round, from any member, brings no name the first did not: caught up.
    c.run_until(bound, |c| c.nodes[&late].stats().caught_up);
    let stats = c.nodes[&late].stats();
    // One part per sync, at most a whole sync's worth each; two rounds.
    let fewest_parts = count * payload.len() / (MAX_SYNC_CHUNKS * MAX_UNSEALED_LEN);
    assert!(
        stats.catch_up_syncs as usize + 1 >= 2 * fewest_parts,
        "{took:?} {stats:?}"
    );
    // Once a round went by with nothing new, syncs are back to the push/pull pace.
    c.run_for(CATCH_UP_PAUSE * 10);
    let after = c.nodes[&late].stats();
    assert_eq!(after.catch_up_syncs, stats.catch_up_syncs);
    assert_eq!(after.syncs_started, stats.syncs_started);
    assert!(c.items_at(late).len() == count, "each item delivered once");
    c.assert_driver_healthy();
}

#[test]
fn a_joiner_that_walked_a_peer_still_catching_up_goes_round_again_from_another() {
    let mut c = Cluster::new();
    // Push/pull far beyond the bound: only catching up can bring the store in time.
    c.swim.push_pull_interval = Duration::from_secs(600);
    let origin = c.add(0, 100);
    let payload = [7u8; 900];
    let count = 1_200;
    c.publish_providers(origin, count, &payload);
    let parts = (count * (payload.len() + 100)).div_ceil(part_bytes());
    // A peer joins the origin, and a joiner joins that peer at once: the joiner's first
    // walk goes round the peer's store while the peer still takes the origin's in.
    let peer = c.add(1, 100);
    c.join(peer, origin);
    c.run_until(Duration::from_secs(5), |c| {
        (1..count).contains(&c.items_at(peer).len())
    });
    let joiner = c.add(2, 100);
    c.join(joiner, peer);
    let bound = CATCH_UP_PAUSE * (MAX_CATCH_UP_ROUNDS as u32 * parts as u32 + 4) + TICK * 50;
    assert!(bound * 4 < c.swim.push_pull_interval);
    c.run_until(bound, |c| {
        c.items_at(joiner).len() == count && c.nodes[&joiner].stats().caught_up
    });
    // The second round compared names and versions, and asked for what the first missed
    // by name: the store came about once.
    let stats = c.nodes[&joiner].stats();
    assert!(stats.hole_syncs >= 1, "{stats:?}");
    assert!(
        stats.sync_chunks_received < count as u64 * 5 / 4,
        "{stats:?}"
    );
    c.assert_driver_healthy();
}

const STORE_ITEMS: usize = 400;
const STORE_PAYLOAD: [u8; 900] = [7u8; 900];

/// An origin's store of [`STORE_ITEMS`] items, which a first member has taken in, until no
/// gossip of them is left: only syncs can bring them to a joiner. Returns the origin.
fn store_held_by_two(push_pull_interval: Duration) -> (Cluster, SocketAddr) {
    let mut c = Cluster::new();
    c.swim.push_pull_interval = push_pull_interval;
    let origin = c.add(0, 100);
    c.publish_providers(origin, STORE_ITEMS, &STORE_PAYLOAD);
    let first = c.add(1, 100);
    c.join(first, origin);
    c.run_until(Duration::from_secs(600), |c| {
        c.items_at(first).len() == STORE_ITEMS
            && [origin, first]
                .iter()
                .all(|at| c.nodes[at].stats().broadcast_backlog == 0)
    });
    (c, origin)
}

#[test]
fn a_joiner_that_loses_chunks_of_an_answer_asks_for_that_part_again() {
    // Push/pull far beyond the bound: only catching up can bring the store in time.
    let (mut c, origin) = store_held_by_two(Duration::from_secs(600));
    let (count, payload) = (STORE_ITEMS, STORE_PAYLOAD);
    let parts = (count * (payload.len() + 100)).div_ceil(part_bytes());
    // One datagram in 50 to the joiner is lost: most answers miss a chunk.
    let joiner = c.add(2, 100);
    c.lossy = Some((joiner, 50));
    c.join(joiner, origin);
    let bound = (CATCH_UP_PAUSE + SYNC_ANSWER_WAIT) * (4 * parts as u32 + 4);
    assert!(bound * 8 < c.swim.push_pull_interval);
    let took = c.run_until(bound, |c| c.items_at(joiner).len() == count);
    let stats = c.nodes[&joiner].stats();
    assert!(stats.syncs_incomplete > 0, "{took:?} {stats:?}");
    // The walk went round even though no answer came whole, and a second round found
    // nothing new: catching up ends.
    c.run_until(bound * 2, |c| c.nodes[&joiner].stats().caught_up);
    let pause = (CATCH_UP_PAUSE + SYNC_ANSWER_WAIT) * 10;
    let later = c.nodes[&joiner].stats().syncs_started;
    c.run_for(pause);
    assert_eq!(c.nodes[&joiner].stats().syncs_started, later);
    c.assert_driver_healthy();
}

#[test]
fn a_joiner_whose_answers_never_move_its_walk_stops_asking_at_once() {
    let (mut c, origin) = store_held_by_two(Duration::from_secs(300));
    let count = STORE_ITEMS;
    // The first chunk of every answer to the joiner is lost: chunks come, but none without
    // a gap from the first, and an answer of one chunk not at all. The walk moves on past
    // the chunks received (their holes asked for apart), until its answers bring nothing.
    let joiner = c.add(2, 100);
    c.first_lost = Some((joiner, KIND_SYNC_RESPONSE));
    c.join(joiner, origin);
    let window = SYNC_ANSWER_WAIT * 20;
    assert!(window * 2 < c.swim.push_pull_interval / 2);
    c.run_for(window);
    let stats = c.nodes[&joiner].stats();
    // Asked again at once after each of the first fruitless answers (three in all), and
    // after each of nine that never came, then left to the push/pull pace: not one sync
    // every answer wait for as long as it lasts.
    assert!(stats.syncs_incomplete >= 3, "{stats:?}");
    assert!(stats.syncs_started <= 3 + 9 + 2, "{stats:?}");
    assert!(!stats.caught_up);
    let asked = |c: &Cluster| {
        let stats = c.nodes[&joiner].stats();
        stats.syncs_started + stats.hole_syncs + stats.stretch_syncs
    };
    let asked_then = asked(&c);
    c.run_for(window);
    assert_eq!(asked(&c), asked_then);
    // Once answers arrive whole again, the push/pull syncs walk the rest.
    c.first_lost = None;
    c.run_until(c.swim.push_pull_interval * 8, |c| {
        c.items_at(joiner).len() == count && c.nodes[&joiner].stats().caught_up
    });
    c.assert_driver_healthy();
}

#[test]
fn the_item_store_is_bounded_and_refuses_past_it_keeping_what_it_holds() {
    let mut c = Cluster::new();
    let origin = c.add(0, 100);
    let err = Driver::new(
        c.nodes[&origin].identity().clone(),
        config(),
        1,
        Interner::default(),
        c.authority("site-0"),
        WALL,
    )
    .with_item_capacity(MAX_ITEM_CAPACITY + 1)
    .err()
    .unwrap();
    assert!(err.to_string().contains("between 1 and 1048576"), "{err}");
    let capacity = 40;
    let node = c.nodes.remove(&origin).unwrap();
    c.nodes
        .insert(origin, node.with_item_capacity(capacity).unwrap());
    let small = c.add(1, 100);
    let node = c.nodes.remove(&small).unwrap();
    c.nodes
        .insert(small, node.with_item_capacity(capacity / 2).unwrap());
    c.join(small, origin);
    c.run_until(Duration::from_secs(2), Cluster::all_see_all);
    for k in 0..capacity {
        assert!(c.publish(origin, Lane::State, &format!("k{k:02}"), 1, b"v"));
    }
    let origin_node = c.nodes.get_mut(&origin).unwrap();
    assert_eq!(
        origin_node.publish(Lane::State, "one-more", 1, b"v"),
        Err(PublishError::StoreFull)
    );
    assert_eq!(
        PublishError::StoreFull.to_string(),
        "the item store is full"
    );
    // A known name still takes newer versions when the store is full.
    assert_eq!(origin_node.publish(Lane::State, "k00", 2, b"w"), Ok(true));
    assert_eq!(origin_node.stats().items_stored, capacity);
    // The smaller store takes what fits, refuses (and counts) the rest, and loses nothing
    // it took.
    c.run_for(config().push_pull_interval * 2);
    let stats = c.nodes[&small].stats();
    assert_eq!(stats.items_stored, capacity / 2);
    assert!(stats.item_refusals.store_full > 0, "{stats:?}");
    let mut held: Vec<_> = c.items_at(small).into_iter().map(|i| i.2).collect();
    held.sort();
    held.dedup();
    assert_eq!(held.len(), capacity / 2);
}

/// Five nodes syncing too rarely to matter within a test.
fn five_nodes_without_syncs() -> (Cluster, Vec<SocketAddr>) {
    let mut c = Cluster::new();
    c.swim.push_pull_interval = Duration::from_secs(600);
    let addrs = c.add_joined(5, 100);
    c.run_until(Duration::from_secs(5), Cluster::all_see_all);
    // Past the joiners' catch-up syncs.
    c.run_for(Duration::from_secs(3));
    (c, addrs)
}

#[test]
fn a_version_gossip_never_brought_is_repaired_within_an_interval_of_settling() {
    let (mut c, addrs) = five_nodes_without_syncs();
    let victim = addrs[3];
    c.deaf_to = Some((victim, b"missed by gossip".to_vec()));
    let syncs_before = total(&c, |s| s.syncs_completed);
    let published = c.now;
    assert!(c.publish(
        addrs[1],
        Lane::State,
        "signals-page/0",
        7,
        b"missed by gossip"
    ));
    let took = c.run_until(Duration::from_secs(3), |c| {
        holds(c, victim, "signals-page/0", 7)
    });
    assert!(
        took <= REPAIR_SETTLE + REPAIR_INTERVAL + TICK * 3,
        "repaired after {took:?}"
    );
    assert!(published + took > published + REPAIR_SETTLE);
    assert_eq!(total(&c, |s| s.syncs_completed), syncs_before);
    assert_eq!(c.nodes[&victim].stats().items_repaired, 1);
    for at in &addrs {
        if *at != victim && *at != addrs[1] {
            assert!(holds(&c, *at, "signals-page/0", 7));
            assert_eq!(c.nodes[at].stats().items_repaired, 0, "gossip reached {at}");
        }
    }
    // Delivered once, and nothing is sent again once everyone holds it.
    c.run_for(REPAIR_WINDOW);
    let copies = c.items_at(victim).iter().filter(|i| i.3 == 7).count();
    assert_eq!(copies, 1);
    let sent = total(&c, |s| s.repair_items_sent);
    c.run_for(REPAIR_WINDOW);
    assert_eq!(total(&c, |s| s.repair_items_sent), sent);
    assert!(total(&c, |s| s.digests_sent) > 5 * 16);
}

#[test]
fn members_in_step_exchange_digests_and_no_items() {
    let (mut c, addrs) = five_nodes_without_syncs();
    for v in 1..=20 {
        c.publish(
            addrs[v % 5],
            Lane::State,
            &format!("signals-page/{v}"),
            v as u64,
            b"load",
        );
        c.run_for(Duration::from_millis(100));
    }
    c.run_for(REPAIR_WINDOW);
    assert!(total(&c, |s| s.digests_sent) >= 5 * 12);
    assert_eq!(total(&c, |s| s.repair_items_sent), 0);
    assert_eq!(total(&c, |s| s.bad_messages), 0);
    // Messages are counted by kind as they leave and as they are accepted; nothing is lost
    // on this network, so every digest sent was accepted.
    let digest = MESSAGE_KINDS.iter().position(|k| *k == "digest").unwrap();
    let sent = total(&c, |s| s.session.sent[digest].messages);
    assert_eq!(sent, total(&c, |s| s.digests_sent));
    assert_eq!(total(&c, |s| s.session.accepted[digest].messages), sent);
    let repair = MESSAGE_KINDS.iter().position(|k| *k == "repair").unwrap();
    assert_eq!(total(&c, |s| s.session.sent[repair].messages), 0);
    let bytes = total(&c, |s| s.session.sent[digest].bytes);
    assert!(
        bytes > sent * 100 && bytes < sent * 400,
        "{bytes} bytes in {sent} digests"
    );
}

fn digest_from(
    c: &Cluster,
    sender: SocketAddr,
    seq: u64,
    to: SocketAddr,
    digest: &Digest,
) -> Vec<u8> {
    let site = c.nodes[&sender].identity().site().to_string();
    let mut body = Vec::new();
    c.nodes[&sender].identity().encode(&mut body);
    digest.encode(&mut body);
    forge(
        &c.ca.authority_of(&site, c.issued[&site].clone()),
        KIND_DIGEST,
        &body,
        seq,
        c.wall_ms(),
        to,
    )
}

#[test]
fn an_empty_digest_gets_a_bounded_answer_at_most_twice_an_interval() {
    let (mut c, addrs) = five_nodes_without_syncs();
    let target = addrs[0];
    let big = vec![b'x'; 900];
    for k in 0..40 {
        c.publish(addrs[2], Lane::State, &format!("provider/{k:02}"), 3, &big);
    }
    c.run_for(REPAIR_SETTLE + TICK);
    let empty = Digest::new(1, REPAIR_WINDOW, &[]);
    let before = c.nodes[&target].stats();
    c.deliver_one(target, &digest_from(&c, addrs[1], 1 << 50, target, &empty));
    let after = c.nodes[&target].stats();
    // Four messages' worth of the 40 items the digest does not name, and no more.
    let sent = after.repair_items_sent - before.repair_items_sent;
    assert!((4..=4 * 2).contains(&sent), "{sent} items sent");
    assert_eq!(after.digests_answered, before.digests_answered + 1);
    c.deliver_one(
        target,
        &digest_from(&c, addrs[1], (1 << 50) + 1, target, &empty),
    );
    let again = c.nodes[&target].stats();
    assert_eq!(again.digests_held_back, before.digests_held_back + 1);
    assert_eq!(again.repair_items_sent, after.repair_items_sent);
}

#[test]
fn bounded_versions_and_wanted_requests_are_answered_and_malformed_ones_refused() {
    let (mut c, addrs) = five_nodes_without_syncs();
    let target = addrs[0];
    let sender = c.nodes[&addrs[1]].identity().clone();
    let mallory = c.authority("site-1");
    // sync id 7, chunk 0 of 1, then entries: tag | len u16 | body.
    let request = |entries: &[(u8, &[u8])]| {
        let mut body = Vec::new();
        sender.encode(&mut body);
        body.extend_from_slice(&[0, 0, 0, 7, 0, 0, 0, 1]);
        for (tag, entry) in entries {
            body.push(*tag);
            body.extend_from_slice(&(entry.len() as u16).to_be_bytes());
            body.extend_from_slice(entry);
        }
        body
    };
    // A name: origin_len | origin | lane | key_len | key.
    let bound = [6, b's', b'i', b't', b'e', b'-', b'2', 0, 1, 0];
    let version = [&bound[..], &[0, 0, 0, 0, 0, 0, 0, 1]].concat();
    let longer = [&version[..], &[0]].concat();
    let (resume, heads, until, versions, version_of, want) = (4, 6, 7, 8, 9, 10);
    let ask = |entries: &[(u8, &[u8])]| (KIND_SYNC_REQUEST, request(entries));
    let answer = |entries: &[(u8, &[u8])]| (KIND_SYNC_RESPONSE, request(entries));
    let bodies = [
        ask(&[(resume, &[]), (until, &bound)]),
        ask(&[(resume, &[]), (heads, &[]), (until, &bound)]),
        ask(&[(resume, &[]), (versions, &[])]),
        ask(&[(want, &bound), (want, &bound)]),
        // An empty bound, a bound that is not a name, two bounds, a bound in an answer.
        ask(&[(resume, &[]), (until, &[])]),
        ask(&[(resume, &[]), (until, &bound[..4])]),
        ask(&[(resume, &[]), (until, &bound), (until, &bound)]),
        answer(&[(until, &bound)]),
        // The versions form with a body or in an answer; an empty want, a want in an
        // answer; a version without its version, with a byte more, in a request.
        ask(&[(resume, &[]), (versions, &[0])]),
        answer(&[(versions, &[])]),
        ask(&[(want, &[])]),
        answer(&[(want, &bound)]),
        answer(&[(version_of, &bound)]),
        answer(&[(version_of, &longer)]),
        ask(&[(resume, &[]), (version_of, &version)]),
    ];
    let before = c.nodes[&target].stats();
    for (i, (kind, body)) in bodies.iter().enumerate() {
        let seq = (1 << 50) + i as u64;
        let message = forge(&mallory, *kind, body, seq, c.wall_ms(), target);
        c.deliver_one(target, &message);
    }
    let after = c.nodes[&target].stats();
    assert_eq!(after.syncs_served, before.syncs_served + 4);
    assert_eq!(after.bad_messages, before.bad_messages + 11);
    assert_eq!(after.items_stored, before.items_stored);
    c.run_for(Duration::from_secs(2));
    assert!(c.all_see_all());
}

#[test]
fn malformed_digests_and_repairs_are_counted_and_change_nothing() {
    let (mut c, addrs) = five_nodes_without_syncs();
    let target = addrs[0];
    let sender = c.nodes[&addrs[1]].identity().clone();
    let mallory = c.authority("site-1");
    let mut digest = Vec::new();
    Digest::new(1, REPAIR_WINDOW, &[1, 2, 3]).encode(&mut digest);
    let mut no_hashes = digest.clone();
    no_hashes[10] = 0;
    let mut item_less = vec![0, 0, 0, 1, 0, 0, 0, 1];
    item_less.extend_from_slice(&[1, 0, 1, 0]); // a member entry in a repair
    let bodies: [(u8, &[u8]); 5] = [
        (KIND_DIGEST, &digest[..12]),
        (KIND_DIGEST, &no_hashes),
        (KIND_REPAIR, &[0, 0, 0, 1, 0, 1, 0, 1]),
        (KIND_REPAIR, &item_less),
        (KIND_REPAIR, &[0, 0, 0, 1, 0, 0, 0, 1, 2, 0, 9, 1]),
    ];
    let stored = c.nodes[&target].stats().items_stored;
    for (i, (kind, tail)) in bodies.iter().enumerate() {
        let mut body = Vec::new();
        sender.encode(&mut body);
        body.extend_from_slice(tail);
        let message = forge(
            &mallory,
            *kind,
            &body,
            (1 << 50) + i as u64,
            c.wall_ms(),
            target,
        );
        c.deliver_one(target, &message);
    }
    let stats = c.nodes[&target].stats();
    assert_eq!(stats.bad_messages, bodies.len() as u64);
    assert_eq!(stats.items_stored, stored);
    assert_eq!(stats.digests_answered, 0);
    c.run_for(Duration::from_secs(2));
    assert!(c.all_see_all());
}

#[test]
fn each_item_version_costs_one_signature_check_however_often_it_comes() {
    let (mut c, addrs) = five_node_cluster();
    c.run_for(Duration::from_secs(2));
    let checks = |c: &Cluster, at: SocketAddr| c.nodes[&at].stats().item_signature_checks;
    let before: Vec<u64> = addrs.iter().map(|at| checks(&c, *at)).collect();
    let syncs_before = total(&c, |s| s.syncs_completed);
    for version in 1..=4 {
        for k in 0..5 {
            let payload = format!("v{version}");
            assert!(c.publish(
                addrs[1],
                Lane::State,
                &format!("provider/{k}"),
                version,
                payload.as_bytes()
            ));
        }
        c.run_for(Duration::from_secs(1));
    }
    // Relays, then several rounds of push/pull syncs: every node is brought each version
    // again and again.
    c.run_for(config().push_pull_interval * 6);
    assert!(total(&c, |s| s.syncs_completed) >= syncs_before + 10);
    let published = c.nodes[&addrs[1]].stats().items_stored as u64;
    for (i, at) in addrs.iter().enumerate() {
        if *at == addrs[1] {
            continue;
        }
        assert_eq!(c.nodes[at].stats().items_stored as u64, published);
        assert_eq!(checks(&c, *at) - before[i], 20, "at {at}");
    }
}

#[test]
fn a_node_whose_sync_brings_many_new_names_catches_up_at_once() {
    let mut c = Cluster::new();
    c.swim.push_pull_interval = Duration::from_secs(5);
    let origin = c.add(0, 100);
    let behind = c.add(1, 100);
    c.join(behind, origin);
    c.run_until(Duration::from_secs(5), |c| {
        c.all_see_all() && c.nodes[&behind].stats().caught_up
    });
    // Published while gossip to `behind` is lost: only syncs bring these items there.
    let payload = [9u8; 900];
    let count = 1_200;
    c.deaf_to = Some((behind, payload[..16].to_vec()));
    c.publish_providers(origin, count, &payload);
    let parts = (count * (payload.len() + 100)).div_ceil(part_bytes());
    assert!(parts >= 3, "the store spans several syncs ({parts})");
    let syncs_before = c.nodes[&behind].stats().catch_up_syncs;
    // One push/pull shows it is behind; then it walks part after part, not one part a
    // push/pull.
    let bound = c.swim.push_pull_interval * 2 + (CATCH_UP_PAUSE + TICK * 10) * (parts as u32 * 2);
    assert!(bound < c.swim.push_pull_interval * parts as u32);
    c.run_until(bound, |c| c.items_at(behind).len() == count);
    assert!(c.nodes[&behind].stats().catch_up_syncs > syncs_before);
    c.assert_driver_healthy();
}

/// A caught-up node holding `held` items that push gossip and repair both missed `count`
/// new ones for (their window passed): the next push/pull answer finds them. From a peer
/// of this release it lists names and versions, and the node wants those it lacks by
/// name; from an older peer it carries the items themselves. Either way, missing a few
/// (or a new site's hundred among thousands) does not make the node catch up again.
/// Returns the requests it made for named items (and holes) meanwhile.
fn items_missed_come_by_push_pull(older: bool, held: usize, count: usize) -> u64 {
    let mut c = Cluster::new();
    c.swim.push_pull_interval = Duration::from_secs(5);
    let origin = c.add(0, 100);
    let missing = c.add(1, 100);
    if older {
        c.speaking(missing, ProtocolRange::new(2, 2).unwrap());
    }
    c.publish_providers(origin, held, b"held already");
    c.join(missing, origin);
    c.run_until(Duration::from_secs(10), |c| {
        c.all_see_all() && c.nodes[&missing].stats().caught_up
    });
    assert_eq!(c.items_at(missing).len(), held);
    let payload = [7u8; 400];
    c.blocked = Some((missing, payload[..16].to_vec()));
    for k in 0..count {
        assert!(c.publish(origin, Lane::State, &format!("new/{k:03}"), 1, &payload));
    }
    // Past what repair offers (the versions stored in its window): only syncs bring them.
    c.run_for(REPAIR_WINDOW + REPAIR_SETTLE + REPAIR_INTERVAL);
    assert_eq!(c.items_at(missing).len(), held);
    c.blocked = None;
    let before = c.nodes[&missing].stats();
    let took = c.run_until(c.swim.push_pull_interval * 3, |c| {
        c.items_at(missing).len() == held + count
    });
    assert!(
        took <= c.swim.push_pull_interval * 2 + SYNC_ANSWER_WAIT,
        "took {took:?}"
    );
    let after = c.nodes[&missing].stats();
    assert!(after.caught_up, "{after:?}");
    assert_eq!(after.catch_up_syncs, before.catch_up_syncs, "{after:?}");
    c.assert_driver_healthy();
    after.hole_syncs - before.hole_syncs
}

#[test]
fn a_few_items_missed_are_listed_by_push_pull_and_wanted_by_name() {
    let wants = items_missed_come_by_push_pull(false, 0, 20);
    assert!(wants >= 1, "{wants}");
}

#[test]
fn a_new_sites_items_missed_among_thousands_are_wanted_not_walked_again() {
    let wants = items_missed_come_by_push_pull(false, 2_000, 100);
    assert!(wants >= 3, "{wants}");
}

#[test]
fn a_few_items_missed_come_as_items_by_push_pull_from_a_peer_of_the_previous_release() {
    let wants = items_missed_come_by_push_pull(true, 0, 20);
    assert_eq!(wants, 0);
}

#[test]
fn a_node_restarted_at_its_address_is_introduced_to_again_and_takes_the_store_at_once() {
    let (mut c, addrs) = five_node_cluster();
    c.publish_providers(addrs[1], 50, b"catalogue");
    c.run_until(Duration::from_secs(5), |c| {
        addrs
            .iter()
            .all(|at| *at == addrs[1] || c.items_at(*at).len() == 50)
    });
    let restarted = addrs[4];
    c.crashed.insert(restarted);
    c.add(4, 101);
    c.events.remove(&restarted);
    c.join(restarted, addrs[0]);
    // Its peers introduced themselves to the address before: they do again to its new
    // life, so their first answers are heard, not refused until a HELLO comes.
    let took = c.run_until(SYNC_ANSWER_WAIT, |c| c.items_at(restarted).len() == 50);
    assert!(took < SYNC_ANSWER_WAIT / 2, "took {took:?}");
    let stats = c.nodes[&restarted].stats().session;
    assert_eq!(stats.dropped_unknown_sender, 0, "{stats:?}");
}
