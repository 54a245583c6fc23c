//! Certificate renewal: a site restarted with a renewed certificate, or renewed in place,
//! loses nothing it published, for itself, for the sites that stayed up and for late
//! joiners; the earlier certificate is carried only while something held needs it.

use super::*;

const SITE: &str = "site-2";

fn three_sites() -> (Cluster, [SocketAddr; 3]) {
    let mut c = Cluster::new();
    let a = c.add(0, 1);
    let b = c.add(1, 1);
    let s = c.add(2, 1);
    c.join(b, a);
    c.join(s, a);
    c.run_until(Duration::from_secs(5), Cluster::all_see_all);
    (c, [a, b, s])
}

fn held_everywhere(c: &Cluster, at: &[SocketAddr], key: &str) -> bool {
    at.iter().all(|node| holds(c, *node, key, 1))
}

#[test]
fn a_site_restarted_with_a_renewed_certificate_loses_nothing_it_published() {
    let (mut c, [a, b, s]) = three_sites();
    c.publish(s, Lane::State, "slot/first-life", 1, b"spent 392");
    c.run_until(Duration::from_secs(5), |c| {
        held_everywhere(c, &[a, b], "slot/first-life")
    });

    // Killed, and back at the same address with a renewed certificate (new key).
    c.crashed.insert(s);
    let renewed = c.ca.renew(SITE, 2);
    c.issued.insert(SITE.to_owned(), renewed);
    c.run_for(Duration::from_secs(3));
    let s = c.add(2, 2);
    c.join(s, a);
    c.publish(s, Lane::State, "slot/second-life", 1, b"spent 71");
    let late = c.add(3, 1);
    c.join(late, b);

    c.run_until(Duration::from_secs(20), |c| {
        held_everywhere(c, &[a, b, late], "slot/second-life")
            && held_everywhere(c, &[s, late], "slot/first-life")
    });
    // The restarted site signed its first life's item again under its new key, and the
    // sites that held it took the new signature in place.
    assert!(c.nodes[&s].stats().items_signed_again >= 1);
    c.run_until(Duration::from_secs(10), |c| {
        [a, b]
            .iter()
            .all(|n| c.nodes[n].stats().item_renewals.signatures_renewed >= 1)
    });
    // The late joiner learned both certificates before the items they signed.
    assert_eq!(c.nodes[&late].stats().item_refusals.bad_signature, 0);
    // Once nothing held is signed by the earlier key, its certificate is carried no more.
    c.run_until(Duration::from_secs(20), |c| {
        c.live()
            .iter()
            .all(|n| c.nodes[n].stats().earlier_certificates == 0)
    });
}

#[test]
fn a_late_joiner_verifies_items_signed_before_a_renewal_while_they_are_not_yet_signed_again() {
    let (mut c, [a, b, s]) = three_sites();
    c.publish(s, Lane::State, "slot/first-life", 1, b"spent 392");
    c.run_until(Duration::from_secs(5), |c| {
        held_everywhere(c, &[a, b], "slot/first-life")
    });
    c.crashed.insert(s);
    let renewed = c.ca.renew(SITE, 2);
    c.issued.insert(SITE.to_owned(), renewed);
    // The restarted site never gets its first life's item back, so it cannot sign it
    // again: the sites that stayed up keep it under the earlier key.
    c.blocked = Some((s, b"slot/first-life".to_vec()));
    let s = c.add(2, 2);
    c.join(s, a);
    c.run_until(Duration::from_secs(5), |c| {
        [a, b]
            .iter()
            .all(|n| matches!(c.state_of(*n, s), Some((MemberState::Alive, 2))))
    });
    let late = c.add(3, 1);
    c.join(late, b);
    c.run_until(Duration::from_secs(10), |c| {
        holds(c, late, "slot/first-life", 1)
    });
    let stats = c.nodes[&late].stats();
    assert_eq!(stats.item_refusals.bad_signature, 0);
    assert!(stats.item_renewals.earlier_key_items >= 1);
}

#[test]
fn a_certificate_renewed_in_place_is_taken_without_a_suspicion_and_loses_nothing() {
    let (mut c, addrs) = five_node_cluster();
    let s = addrs[2];
    let site = c.nodes[&s].identity().site().to_string();
    for k in 0..20 {
        c.nodes
            .get_mut(&s)
            .unwrap()
            .publish(Lane::State, &format!("provider/{k:02}"), 1, b"before")
            .unwrap();
    }
    c.publish(s, Lane::State, "provider/last", 1, b"before");
    c.run_until(Duration::from_secs(10), |c| {
        addrs
            .iter()
            .filter(|n| **n != s)
            .all(|n| (0..20).all(|k| holds(c, *n, &format!("provider/{k:02}"), 1)))
    });

    let renewed = c.ca.renew(&site, 3);
    c.renew(s, c.ca.authority_of(&site, renewed.clone()));
    c.issued.insert(site.clone(), renewed);
    c.publish(s, Lane::State, "provider/after", 1, b"after");

    // Probe rounds well past the grace for messages under the old key: nobody suspects s.
    let until = c.now + Duration::from_secs(12);
    while c.now < until {
        c.step();
        for viewer in addrs.iter().filter(|n| **n != s) {
            assert_eq!(
                c.state_of(*viewer, s).map(|state| state.0),
                Some(MemberState::Alive),
                "{viewer} at {:?}",
                c.now
            );
        }
    }
    assert_eq!(c.nodes[&s].stats().refutations, 0);
    assert_eq!(c.nodes[&s].stats().renewals, 1);
    assert_eq!(c.nodes[&s].stats().items_signed_again, 21);
    let late = c.add(9, 1);
    c.join(late, addrs[0]);
    c.run_until(Duration::from_secs(20), |c| {
        (0..20).all(|k| holds(c, late, &format!("provider/{k:02}"), 1))
            && holds(c, late, "provider/after", 1)
    });
    for node in c.live() {
        let stats = c.nodes[&node].stats();
        assert_eq!(stats.item_refusals.bad_signature, 0, "at {node}");
        assert_eq!(stats.session.dropped_bad_signature, 0, "at {node}");
    }
    // Every site that held s's items took the renewed signatures.
    for node in addrs.iter().filter(|n| **n != s) {
        assert_eq!(
            c.nodes[node].stats().item_renewals.signatures_renewed,
            21,
            "at {node}"
        );
    }
}

#[test]
fn messages_under_the_previous_key_are_taken_for_the_grace_then_refused_with_a_hello_asked() {
    let (mut c, [a, _, s]) = three_sites();
    let old = c.authority(SITE);
    let renewed = c.ca.renew(SITE, 2);
    c.renew(s, c.ca.authority_of(SITE, renewed));

    // A digest signed by the old key, as if sent just before the renewal.
    let digest = |c: &Cluster, seq: u64| {
        let mut body = Vec::new();
        c.nodes[&s].identity().encode(&mut body);
        forge(&old, KIND_DIGEST, &body, seq, c.wall_ms(), a)
    };
    let before = c.nodes[&a].stats().session;
    let message = digest(&c, 1 << 40);
    c.deliver_one(a, &message);
    let after = c.nodes[&a].stats().session;
    assert_eq!(
        after.previous_key_messages,
        before.previous_key_messages + 1
    );

    c.run_for(grid_core::wire::session::KEY_SWITCH_GRACE);
    let hellos = c.nodes[&a].stats().session.hellos_sent;
    let message = digest(&c, (1 << 40) + 1);
    c.deliver_one(a, &message);
    let late = c.nodes[&a].stats().session;
    assert_eq!(late.previous_key_messages, after.previous_key_messages);
    assert_eq!(late.dropped_bad_signature, after.dropped_bad_signature + 1);
    // Refused, and its sender asked to introduce itself again.
    assert_eq!(late.hellos_sent, hellos + 1);
}

#[test]
fn new_trust_anchors_alone_change_no_key_and_forget_sites_they_refuse() {
    let (mut c, [a, b, s]) = three_sites();
    // a keeps its certificate but trusts only another CA: the others' certificates no
    // longer pass, and their items wait for certificates that do.
    let issued = c.issued["site-0"].clone();
    let other_ca = TestCa::new();
    let policy = other_ca.policy();
    let credentials = grid_core::identity::auth::SiteCredentials::new(
        "site-0",
        vec![issued.cert.clone(), c.ca.der()],
        &issued.key,
        &c.ca.policy(),
        WALL,
    )
    .unwrap();
    let authority = grid_core::identity::auth::Authority::Certified {
        credentials: Box::new(credentials),
        policy,
    };
    let hellos = c.nodes[&a].stats().session.hellos_sent;
    let mut out = Outbox::default();
    let now = c.now;
    c.nodes
        .get_mut(&a)
        .unwrap()
        .renew(now, authority, &mut out)
        .unwrap();
    assert_eq!(c.nodes[&a].stats().renewals, 0);
    assert_eq!(c.nodes[&a].stats().session.hellos_sent, hellos);
    c.deliver(out);
    c.publish(s, Lane::State, "after-anchors", 1, b"x");
    c.run_for(Duration::from_secs(2));
    assert!(holds(&c, b, "after-anchors", 1));
    assert!(!holds(&c, a, "after-anchors", 1));
}

fn fingerprint(der: &[u8]) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, der);
    digest.as_ref().try_into().unwrap()
}

#[test]
fn a_revoked_certificate_drops_its_site_as_left_and_its_items_until_it_comes_back_renewed() {
    let (mut c, [a, b, s]) = three_sites();
    c.publish(s, Lane::State, "slot/revoked", 1, b"spent");
    c.run_until(Duration::from_secs(5), |c| {
        held_everywhere(c, &[a, b], "slot/revoked")
    });
    let stolen = fingerprint(&c.issued[SITE].cert);
    let identity = c.nodes[&s].identity().clone();
    for (at, site) in [(a, "site-0"), (b, "site-1")] {
        let issued = c.issued[site].clone();
        c.renew(at, c.ca.authority_revoking(site, issued, &[stolen]));
    }
    for at in [a, b] {
        let stats = c.nodes[&at].stats();
        assert_eq!(stats.members_revoked, 1, "at {at}");
        assert_eq!(stats.item_renewals.revoked_items, 1, "at {at}");
        assert!(c.events[&at].contains(&Event::MemberLeft(identity.clone())));
    }
    // The revoked site keeps talking: nothing it says is taken.
    let refused_before = total(&c, |n| n.session.dropped_untrusted_certificate);
    c.publish(s, Lane::State, "slot/after-revocation", 1, b"spent");
    c.run_for(Duration::from_secs(3));
    for at in [a, b] {
        assert!(!holds(&c, at, "slot/after-revocation", 1));
        assert_ne!(
            c.state_of(at, s).map(|state| state.0),
            Some(MemberState::Alive)
        );
    }
    assert!(total(&c, |n| n.session.dropped_untrusted_certificate) > refused_before);

    // Back with a fresh certificate: taken in, its items taken again.
    c.crashed.insert(s);
    let fresh = c.ca.renew(SITE, 2);
    c.issued.insert(SITE.to_owned(), fresh);
    let s = c.add(2, 2);
    c.join(s, a);
    c.publish(s, Lane::State, "slot/back", 1, b"spent");
    c.run_until(Duration::from_secs(10), |c| {
        held_everywhere(c, &[a, b], "slot/back")
            && [a, b]
                .iter()
                .all(|n| matches!(c.state_of(*n, s), Some((MemberState::Alive, g)) if g >= 2))
    });
}

#[test]
fn items_waiting_for_their_certificate_are_taken_within_a_second_of_it_being_reachable() {
    let mut c = Cluster::new();
    let a = c.add(0, 1);
    let b = c.add(1, 1);
    c.join(b, a);
    c.run_until(Duration::from_secs(5), Cluster::all_see_all);
    // The joiner hears nothing that carries b's certificate: its items wait.
    let certificate = c.issued["site-1"].cert.clone();
    let joiner = c.add(2, 1);
    c.blocked = Some((joiner, certificate));
    c.join(joiner, a);
    c.run_until(Duration::from_secs(5), |c| {
        c.nodes[&joiner]
            .members()
            .iter()
            .any(|m| m.id.socket_addr() == a)
    });
    for k in 0..5 {
        c.publish(b, Lane::State, &format!("provider/{k}"), 1, b"waits");
    }
    c.run_until(Duration::from_secs(5), |c| {
        c.nodes[&joiner].stats().item_refusals.unverified_origin >= 5
    });
    assert!(!holds(&c, joiner, "provider/0", 1));
    // Its view is partial, and says so.
    let stats = c.nodes[&joiner].stats();
    assert!(!stats.caught_up && stats.items_waiting >= 5);

    // b's certificate can reach the joiner again: the next item that waits makes the
    // joiner ask b (at once, or as soon as the one-a-second answer budget for b's address
    // allows), and everything waiting is taken as b's HELLO arrives, well before a sync.
    c.blocked = None;
    c.publish(b, Lane::State, "provider/5", 1, b"waits");
    let bound = grid_core::wire::session::ANSWER_INTERVAL + Duration::from_millis(100);
    let took = c.run_until(bound, |c| {
        (0..6).all(|k| holds(c, joiner, &format!("provider/{k}"), 1))
    });
    assert!(took < config().push_pull_interval, "took {took:?}");
    assert!(c.nodes[&joiner].stats().keys_asked >= 1);
    c.run_until(Duration::from_secs(10), |c| {
        c.nodes[&joiner].stats().caught_up
    });
    assert_eq!(c.nodes[&joiner].stats().items_waiting, 0);
}
