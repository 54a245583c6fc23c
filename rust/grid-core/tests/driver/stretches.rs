//! Stretch walks: a node catching up on a store of many answers walks later stretches of
//! it from other peers at once, and the whole walk skips what they walked whole.

use super::store::part_bytes;
use super::*;
use grid_core::wire::versions::ProtocolRange;
use grid_core::wire::KIND_SYNC_RESPONSE;

/// The item names `at` holds (its own included): cheaper to read every step than its items.
fn stored(c: &Cluster, at: SocketAddr) -> usize {
    c.nodes[&at].stats().items_stored
}

/// Six sites holding one another's items (`per_site` each), and the parts a walk of the
/// whole store takes.
fn six_sites(c: &mut Cluster, per_site: usize) -> (Vec<SocketAddr>, usize) {
    // The sites take each other's items by push/pull walks (each push/pull that brings
    // many names sets off a catch-up); the joiner added later walks only.
    c.swim.push_pull_interval = Duration::from_secs(1);
    let sites = c.add_joined(6, 100);
    let payload = [7u8; 900];
    for at in &sites {
        c.publish_providers(*at, per_site, &payload);
    }
    let whole = sites.len() * per_site;
    c.run_until(Duration::from_secs(120), |c| {
        sites.iter().all(|at| stored(c, *at) == whole)
    });
    c.swim.push_pull_interval = Duration::from_secs(600);
    let parts = (sites.len() * per_site * (payload.len() + 100)).div_ceil(part_bytes());
    (sites, parts)
}

/// The fewest parts a walk of `whole` items of [`six_sites`] takes (a part holds at most
/// a whole sync's worth of items), and how long one walk then needs at best (a part per
/// pause).
fn one_walk(whole: usize) -> (usize, Duration) {
    let fewest_parts = whole * 900 / (MAX_SYNC_CHUNKS * MAX_UNSEALED_LEN);
    (fewest_parts, CATCH_UP_PAUSE * fewest_parts as u32)
}

#[test]
fn a_joiner_walks_stretches_of_a_large_store_from_several_peers_at_once() {
    let mut c = Cluster::new();
    let per_site = 700;
    let (sites, _) = six_sites(&mut c, per_site);
    let whole = sites.len() * per_site;
    let (fewest_parts, one_walk) = one_walk(whole);
    assert!(
        fewest_parts >= 10,
        "the store spans many answers ({fewest_parts})"
    );

    let late = c.add(9, 100);
    c.join(late, sites[0]);
    let took = c.run_until(one_walk * 2, |c| stored(c, late) == whole);
    // 0.6 s in 57 runs of 60, 0.7 s in three: about half of one walk at best.
    assert!(
        took * 4 < one_walk * 3,
        "held the store in {took:?}, one walk takes at least {one_walk:?}"
    );
    assert!(c.nodes[&late].stats().stretch_syncs >= 2);
    // A second round checks what the first brought, by names and versions alone: the
    // store comes about once (an item fills about a chunk here).
    c.run_until(one_walk * 4, |c| c.nodes[&late].stats().caught_up);
    let stats = c.nodes[&late].stats();
    assert!(
        stats.sync_chunks_received < whole as u64 * 5 / 4,
        "{} chunks for {whole} items",
        stats.sync_chunks_received
    );
    assert_eq!(c.items_at(late).len(), whole, "each item delivered once");
    c.assert_driver_healthy();
}

#[test]
fn stretches_whose_answers_are_lost_are_walked_by_the_whole_walk() {
    let mut c = Cluster::new();
    let per_site = 400;
    let (sites, _) = six_sites(&mut c, per_site);
    let whole = sites.len() * per_site;

    let late = c.add(9, 100);
    c.join(late, sites[0]);
    c.run_until(Duration::from_secs(10), |c| {
        c.nodes[&late].stats().stretch_syncs >= 1
    });
    // Every sync answer from here on is lost, until the stretch walks gave up theirs (each
    // asks one other peer again first).
    c.held = Some((KIND_SYNC_RESPONSE, Vec::new()));
    c.run_until(SYNC_ANSWER_WAIT * 3, |c| {
        c.nodes[&late].stats().stretches_lost >= 1
    });
    c.run_for(SYNC_ANSWER_WAIT);
    let (_, lost) = c.held.take().unwrap();
    assert!(lost.iter().any(|(to, _)| *to == late));
    let held_then = stored(&c, late);
    assert!(
        held_then < whole,
        "{held_then} of {whole} held when the answers were lost"
    );
    c.run_until(Duration::from_secs(60), |c| {
        stored(c, late) == whole && c.nodes[&late].stats().caught_up
    });
    c.assert_driver_healthy();
}

#[test]
fn answers_that_come_in_part_move_the_walks_on_at_once() {
    let mut c = Cluster::new();
    let per_site = 700;
    let (sites, _) = six_sites(&mut c, per_site);
    let whole = sites.len() * per_site;
    let (fewest_parts, one_walk) = one_walk(whole);

    let late = c.add(9, 100);
    // A datagram in 150 to the joiner is lost: no answer of a store walk comes whole (each
    // is 256 chunks). Waiting out every answer's 2 s, the joiner would hold the store after
    // some 80 s.
    c.lossy = Some((late, 150));
    c.join(late, sites[0]);
    let held = c.run_until(one_walk * 8, |c| stored(c, late) == whole);
    let caught_up = held + c.run_until(one_walk * 16, |c| c.nodes[&late].stats().caught_up);
    let stats = c.nodes[&late].stats();
    assert!(
        stats.syncs_incomplete >= fewest_parts as u64,
        "answers came in part: {stats:?}"
    );
    // Answers in part moved the stretches on rather than ended them, and the chunks lost
    // from them were asked for apart.
    assert!(stats.stretch_syncs >= 4, "{stats:?}");
    assert_eq!(stats.stretches_lost, 0, "{stats:?}");
    assert!(stats.hole_syncs >= fewest_parts as u64, "{stats:?}");
    assert!(
        caught_up < one_walk * 6,
        "held in {held:?}, caught up in {caught_up:?}; one walk takes at least {one_walk:?}"
    );
    // An item fills about a chunk here: the store about once, the holes, and a check
    // round of names and versions, not the rest of each answer again after its first lost
    // chunk.
    assert!(
        stats.sync_chunks_received < 2 * whole as u64,
        "{} chunks for {whole} items",
        stats.sync_chunks_received
    );
    assert_eq!(c.items_at(late).len(), whole, "each item delivered once");
    c.assert_driver_healthy();
}

#[test]
fn a_joiner_of_a_previous_release_walks_and_is_answered_unbounded() {
    // Holes and bounded answers need both ends to speak protocol 3: a joiner that speaks
    // only protocol 2 walks the same store from current peers, each answer resuming after
    // the chunks received without a gap, as before bounds.
    let mut c = Cluster::new();
    let per_site = 400;
    let (sites, _) = six_sites(&mut c, per_site);
    let whole = sites.len() * per_site;
    let late = c.add(9, 100);
    c.speaking(late, ProtocolRange::new(2, 2).unwrap());
    c.lossy = Some((late, 150));
    c.join(late, sites[0]);
    c.run_until(Duration::from_secs(60), |c| {
        stored(c, late) == whole && c.nodes[&late].stats().caught_up
    });
    let stats = c.nodes[&late].stats();
    assert!(
        stats.syncs_incomplete >= 1,
        "answers came in part: {stats:?}"
    );
    assert_eq!(stats.hole_syncs, 0, "{stats:?}");
    assert_eq!(c.items_at(late).len(), whole, "each item delivered once");
    c.assert_driver_healthy();
}
