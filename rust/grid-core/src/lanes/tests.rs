//! Tests of the item encoding, the store and its export.

use std::time::Duration;

use foca::Invalidates;

use super::encoding::{decode_item, encode_unsigned};
use super::keys::Role;
use super::repair::{version_hash, REPAIR_WINDOW};
use super::*;
use crate::identity::auth::{PublicKey, ITEM_DOMAIN, SIGNATURE_LEN};
use crate::identity::Interner;
use crate::wire::Reader;

fn unsigned(_: &[u8]) -> [u8; SIGNATURE_LEN] {
    [0; SIGNATURE_LEN]
}

fn encoded(origin: &str, lane: Lane, key: &str, version: u64, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_publish(origin, lane, key, version, payload, &mut out, unsigned).unwrap();
    out
}

/// Offers `s` an unsigned item from a peer.
fn offer(
    s: &mut ItemStore,
    origin: &str,
    lane: Lane,
    key: &str,
    version: u64,
    payload: &[u8],
) -> Option<BroadcastKey> {
    s.accept(&encoded(origin, lane, key, version, payload), true)
}

fn store() -> ItemStore {
    ItemStore::new(100, Interner::default(), false)
}

#[test]
fn only_newer_versions_are_news() {
    let mut s = store();
    assert!(offer(&mut s, "a", Lane::State, "k", 2, b"v2").is_some());
    assert!(offer(&mut s, "a", Lane::State, "k", 2, b"v2").is_none());
    assert!(offer(&mut s, "a", Lane::State, "k", 1, b"v1").is_none());
    assert!(offer(&mut s, "a", Lane::State, "k", 3, b"v3").is_some());
    // Same key on another lane or from another origin is another item.
    assert!(offer(&mut s, "a", Lane::Gateway, "k", 1, b"g").is_some());
    assert!(offer(&mut s, "b", Lane::State, "k", 1, b"b").is_some());
    let fresh: Vec<_> = s.take_fresh().map(|i| (i.origin, i.version)).collect();
    assert_eq!(fresh.len(), 4);
    assert_eq!(s.len(), 3);
}

#[test]
fn a_signed_store_takes_only_items_its_origin_signed() {
    use crate::identity::auth::{test_key, Signer};
    let (signer, key): (Signer, PublicKey) = test_key(1);
    let (forger, _) = test_key(2);
    let mut s = ItemStore::new(100, Interner::default(), true);
    let signed = |signer: &Signer, version: u64| {
        let mut out = Vec::new();
        encode_publish("a", Lane::State, "k", version, b"v", &mut out, |bytes| {
            signer.sign(ITEM_DOMAIN, bytes)
        })
        .unwrap();
        out
    };
    // Nobody vouched for "a" yet: the item waits for its origin's key.
    assert!(s.accept(&signed(&signer, 1), true).is_none());
    assert_eq!(s.refusals().unverified_origin, 1);
    s.trust_origin(&Arc::from("a"), key, Role::Current);
    assert_eq!(s.take_fresh().map(|i| i.version).collect::<Vec<_>>(), [1]);
    assert!(s.accept(&signed(&forger, 2), true).is_none());
    assert_eq!(s.refusals().bad_signature, 1);
    let mut altered = signed(&signer, 2);
    let at = altered.len() - SIGNATURE_LEN - 1;
    altered[at] ^= 1;
    assert!(s.accept(&altered, true).is_none());
    assert_eq!(s.refusals().bad_signature, 2);
    // A forged far-future version changes nothing: the next real one still counts.
    assert!(s.accept(&signed(&forger, u64::MAX), true).is_none());
    assert!(s.accept(&signed(&signer, 2), true).is_some());
    // Syncs re-export the origin's own signature.
    let mut exported = Vec::new();
    let mut scratch = Vec::new();
    s.export(
        (None, None),
        WalkLanes::All,
        ExportForm::Items,
        &mut scratch,
        |_, item, _| {
            exported.push(item.to_vec());
            true
        },
    );
    assert_eq!(exported, vec![signed(&signer, 2)]);
    s.distrust_origin("a");
    assert!(s.accept(&signed(&signer, 3), true).is_none());
}

#[test]
fn items_of_a_renewed_key_wait_for_it_and_earlier_keys_vouch_until_signed_again() {
    use crate::identity::auth::{test_key, Signer};
    let (first, first_key): (Signer, PublicKey) = test_key(1);
    let (renewed, renewed_key) = test_key(2);
    let mut s = ItemStore::new(100, Interner::default(), true);
    let origin: Arc<str> = Arc::from("a");
    let signed = |signer: &Signer, key: &str| {
        let mut out = Vec::new();
        encode_publish("a", Lane::State, key, 1, b"v", &mut out, |bytes| {
            signer.sign(ITEM_DOMAIN, bytes)
        })
        .unwrap();
        out
    };
    s.trust_origin(&origin, first_key, Role::Current);
    assert!(s.accept(&signed(&first, "old"), true).is_some());
    // Signed by a key not learned yet: refused for now, taken once the key is trusted.
    assert!(s.accept(&signed(&renewed, "new"), true).is_none());
    assert_eq!(s.refusals().bad_signature, 1);
    s.trust_origin(&origin, renewed_key, Role::Current);
    let fresh: Vec<_> = s.take_fresh().map(|i| i.key.to_string()).collect();
    assert_eq!(fresh, ["old", "new"]);
    // The earlier key still vouches for "old": a sync carries its certificate with it.
    let mut earlier = Vec::new();
    s.export(
        (None, None),
        WalkLanes::All,
        ExportForm::Items,
        &mut Vec::new(),
        |_, item, fingerprint| {
            earlier.push((
                decode_item(item).unwrap().key.to_owned(),
                fingerprint.is_some(),
            ));
            true
        },
    );
    assert_eq!(
        earlier,
        [("new".to_owned(), false), ("old".to_owned(), true)]
    );
    assert!(s.forget_unused_earlier_keys().is_empty());
    // The version as it was taken, brought again by a relay that has not heard of the
    // renewal: its signature was checked when it came, and is not checked again.
    let checked = s.signature_checks();
    assert!(s.accept(&signed(&first, "old"), true).is_none());
    assert_eq!(s.signature_checks(), checked);
    // The origin's renewed signature replaces the held one (not news for the host).
    assert!(s.accept(&signed(&renewed, "old"), true).is_some());
    assert_eq!(s.signature_checks(), checked + 1);
    assert_eq!(s.renewals().signatures_renewed, 1);
    assert!(!s.has_fresh());
    assert_eq!(s.forget_unused_earlier_keys().len(), 1);
    // A forgery waiting is not counted again when a key arrives.
    let (forger, _) = test_key(3);
    assert!(s.accept(&signed(&forger, "forged"), true).is_none());
    let (_, third_key) = test_key(4);
    s.trust_origin(&origin, third_key, Role::Current);
    assert_eq!(s.refusals().bad_signature, 2);
    assert!(!s.has_fresh());
}

#[test]
fn own_items_held_under_an_earlier_key_are_handed_to_be_signed_again() {
    use crate::identity::auth::test_key;
    let (_, first_key) = test_key(1);
    let (_, renewed_key) = test_key(2);
    let mut s = ItemStore::new(100, Interner::default(), true);
    let me: Arc<str> = Arc::from("me");
    s.set_own(&me);
    s.trust_origin(&me, first_key, Role::Current);
    s.accept(&encoded("me", Lane::State, "k", 1, b"x"), false);
    assert!(s.take_stale_own().is_empty());
    s.trust_origin(&me, renewed_key, Role::Current);
    let stale = s.take_stale_own();
    assert_eq!(stale.len(), 1);
    assert_eq!((&*stale[0].key, stale[0].version), ("k", 1));
    // Handed once; signed again, it is the current key's.
    assert!(s.take_stale_own().is_empty());
    assert!(s.replace_signature("me", Lane::State, "k", [7; SIGNATURE_LEN]));
    assert_eq!(s.forget_unused_earlier_keys().len(), 1);
}

#[test]
fn own_items_are_stored_but_not_delivered() {
    let mut s = store();
    assert!(s
        .accept(&encoded("me", Lane::Metadata, "k", 1, b"x"), false)
        .is_some());
    assert!(!s.has_fresh());
    assert!(!s.is_newer("me", Lane::Metadata, "k", 1));
    assert!(s.is_newer("me", Lane::Metadata, "k", 2));
}

#[test]
fn newer_invalidates_older_of_the_same_name_only() {
    let mut s = store();
    let k1 = offer(&mut s, "a", Lane::State, "k", 1, b"").unwrap();
    let k2 = offer(&mut s, "a", Lane::State, "k", 2, b"").unwrap();
    let other_key = offer(&mut s, "a", Lane::State, "j", 3, b"").unwrap();
    let other_lane = offer(&mut s, "a", Lane::Gateway, "k", 3, b"").unwrap();
    let other_origin = offer(&mut s, "b", Lane::State, "k", 3, b"").unwrap();
    assert!(k2.invalidates(&k1));
    assert!(!k1.invalidates(&k2));
    for other in [&other_key, &other_lane, &other_origin] {
        assert!(!other.invalidates(&k1));
        assert!(!k2.invalidates(other));
    }
}

#[test]
fn private_keys_are_refused_and_counted() {
    let pem = b"-----BEGIN PRIVATE KEY-----\nabc\n-----END PRIVATE KEY-----\n";
    let mut out = Vec::new();
    assert_eq!(
        encode_publish("a", Lane::Cert, "tls", 1, pem, &mut out, unsigned),
        Err(PublishError::PrivateKey)
    );
    // The marker is only refused on the cert lane.
    assert!(encode_publish("a", Lane::Metadata, "note", 1, pem, &mut out, unsigned).is_ok());
    let mut raw = Vec::new();
    encode_unsigned("a", Lane::Cert, "tls", 1, pem, &mut raw);
    raw.extend_from_slice(&[0; SIGNATURE_LEN]);
    let mut s = store();
    assert!(s.accept(&raw, true).is_none());
    assert_eq!(s.refusals().private_key, 1);
    assert!(!s.has_fresh());
    let rsa = b"-----BEGIN RSA PRIVATE KEY-----";
    raw.clear();
    encode_unsigned("a", Lane::Cert, "tls", 2, rsa, &mut raw);
    raw.extend_from_slice(&[0; SIGNATURE_LEN]);
    assert!(s.accept(&raw, true).is_none());
    assert_eq!(s.refusals().private_key, 2);
}

#[test]
fn oversized_and_bad_keys_are_refused() {
    let mut out = Vec::new();
    let big = vec![0u8; MAX_ITEM_LEN];
    assert!(matches!(
        encode_publish("a", Lane::State, "k", 1, &big, &mut out, unsigned),
        Err(PublishError::TooLarge { .. })
    ));
    let fits = vec![0u8; MAX_ITEM_LEN - encoded_item_len("a", "k", b"")];
    assert!(encode_publish("a", Lane::State, "k", 1, &fits, &mut out, unsigned).is_ok());
    assert_eq!(out.len(), MAX_ITEM_LEN);
    assert!(matches!(
        encode_publish("a", Lane::State, "", 1, b"", &mut out, unsigned),
        Err(PublishError::BadKey(_))
    ));
    assert!(matches!(
        encode_publish(
            "a",
            Lane::State,
            &"k".repeat(MAX_KEY_LEN + 1),
            1,
            b"",
            &mut out,
            unsigned
        ),
        Err(PublishError::BadKey(_))
    ));
}

#[test]
fn malformed_items_are_counted() {
    let mut s = store();
    let good = encoded("a", Lane::State, "k", 1, b"x");
    for cut in 0..good.len() - 1 {
        assert!(s.accept(&good[..cut], true).is_none());
    }
    let mut bad_lane = good.clone();
    bad_lane[2] = 9;
    assert!(s.accept(&bad_lane, true).is_none());
    assert_eq!(s.refusals().malformed, good.len() as u64);
    assert!(s.is_empty());
}

#[test]
fn store_is_bounded() {
    let mut s = ItemStore::new(2, Interner::default(), false);
    assert!(offer(&mut s, "a", Lane::State, "1", 1, b"").is_some());
    assert!(offer(&mut s, "a", Lane::State, "2", 1, b"").is_some());
    assert!(offer(&mut s, "a", Lane::State, "3", 1, b"").is_none());
    assert!(offer(&mut s, "b", Lane::State, "1", 1, b"").is_none());
    // Updating a known name still works when full.
    assert!(offer(&mut s, "a", Lane::State, "1", 2, b"").is_some());
    assert_eq!(s.refusals().store_full, 2);
    assert!(s.is_full_for("a", Lane::State, "3"));
    assert!(!s.is_full_for("a", Lane::State, "1"));
}

fn name(origin: &str, lane: Lane, key: &str) -> ItemName {
    ItemName {
        origin: Arc::from(origin),
        lane,
        key: Arc::from(key),
    }
}

/// Exports at most `budget` items after `after`: their names and how the export ended.
fn export_part(
    s: &ItemStore,
    after: Option<&ItemName>,
    budget: usize,
) -> (Vec<(String, Lane, String)>, ExportEnd) {
    export_lanes(s, (after, None), WalkLanes::All, budget)
}

/// [`export_part`] of the `walked` lanes, between `after` and `until`.
fn export_lanes(
    s: &ItemStore,
    (after, until): (Option<&ItemName>, Option<&ItemName>),
    walked: WalkLanes,
    budget: usize,
) -> (Vec<(String, Lane, String)>, ExportEnd) {
    let mut scratch = Vec::new();
    let mut names = Vec::new();
    let end = s.export(
        (after, until),
        walked,
        ExportForm::Items,
        &mut scratch,
        |_, item, _| {
            if names.len() == budget {
                return false;
            }
            let view = decode_item(item).unwrap();
            names.push((view.origin.to_owned(), view.lane, view.key.to_owned()));
            true
        },
    );
    (names, end)
}

#[test]
fn the_default_store_holds_a_100_by_100_mesh_and_refuses_past_its_capacity() {
    let mut s = ItemStore::new(DEFAULT_ITEM_CAPACITY, Interner::default(), false);
    // 100 sites, each: 100 providers (catalogue and signals), gateway, metadata and a
    // certificate in three chunks.
    for site in 0..100 {
        let origin = format!("site-{site:03}");
        for provider in 0..100 {
            for key in [
                format!("provider/p{provider}"),
                format!("signals/p{provider}"),
            ] {
                assert!(offer(&mut s, &origin, Lane::State, &key, 1, b"p").is_some());
            }
        }
        for (lane, key) in [(Lane::Gateway, "gateway"), (Lane::Metadata, "metadata")] {
            assert!(offer(&mut s, &origin, lane, key, 1, b"p").is_some());
        }
        for chunk in 0..3 {
            let key = format!("cert/{chunk}");
            assert!(offer(&mut s, &origin, Lane::Cert, &key, 1, b"p").is_some());
        }
    }
    assert_eq!(s.len(), 20_500);
    let mut filler = 0;
    while s.len() < DEFAULT_ITEM_CAPACITY {
        let key = format!("k{filler}");
        assert!(offer(&mut s, "site-999", Lane::State, &key, 1, b"p").is_some());
        filler += 1;
    }
    assert!(offer(&mut s, "site-999", Lane::State, "one-more", 1, b"p").is_none());
    assert_eq!(s.refusals().store_full, 1);
    assert!(s.is_full_for("site-999", Lane::State, "one-more"));
    assert!(offer(&mut s, "site-000", Lane::Gateway, "gateway", 2, b"q").is_some());
    let mut scratch = Vec::new();
    let mut exported = 0;
    let end = s.export(
        (None, None),
        WalkLanes::All,
        ExportForm::Items,
        &mut scratch,
        |_, _, _| {
            exported += 1;
            true
        },
    );
    assert_eq!(
        (exported, end),
        (DEFAULT_ITEM_CAPACITY, ExportEnd::Complete)
    );
}

#[test]
fn export_walks_names_in_one_order_from_where_it_stopped() {
    let mut s = store();
    // Inserted out of order; walked by origin, then lane (cert, gateway, metadata,
    // state), then key, whatever the insertion order.
    for (origin, lane, key) in [
        ("b", Lane::State, "1"),
        ("a", Lane::State, "2"),
        ("a", Lane::Cert, "0"),
        ("a", Lane::State, "1"),
        ("b", Lane::Gateway, "gw"),
    ] {
        offer(&mut s, origin, lane, key, 1, b"p");
    }
    offer(&mut s, "gone", Lane::State, "x", 1, b"p");
    assert_eq!(s.forget("gone", &[(Lane::State, "x".to_owned())]), 1);
    let order = [
        ("a", Lane::Cert, "0"),
        ("a", Lane::State, "1"),
        ("a", Lane::State, "2"),
        ("b", Lane::Gateway, "gw"),
        ("b", Lane::State, "1"),
    ];
    let owned = |names: &[(&str, Lane, &str)]| -> Vec<(String, Lane, String)> {
        names
            .iter()
            .map(|(o, l, k)| (o.to_string(), *l, k.to_string()))
            .collect()
    };
    let stopped = |resume: &ItemName, wrapped| ExportEnd::Stopped {
        resume: Some(resume.clone()),
        wrapped,
    };
    let (all, end) = export_part(&s, None, 10);
    assert_eq!(all, owned(&order), "a forgotten payload is not exported");
    assert_eq!(end, ExportEnd::Complete);

    let (first, end) = export_part(&s, None, 2);
    assert_eq!(first, owned(&order[..2]));
    let resume = name("a", Lane::State, "1");
    assert_eq!(end, stopped(&resume, false));
    let (second, end) = export_part(&s, Some(&resume), 2);
    assert_eq!(second, owned(&order[2..4]));
    let resume = name("b", Lane::Gateway, "gw");
    assert_eq!(end, stopped(&resume, false));
    // Past the last name the walk goes round and says so.
    let (third, end) = export_part(&s, Some(&resume), 2);
    assert_eq!(third, owned(&[order[4], order[0]]));
    assert_eq!(end, stopped(&name("a", Lane::Cert, "0"), true));
    // From a name nobody holds, the walk resumes at the next one held; with room for
    // everything it goes round once and is complete.
    let (rest, end) = export_part(&s, Some(&name("a", Lane::State, "15")), 10);
    assert_eq!(
        rest,
        owned(&[order[2], order[3], order[4], order[0], order[1]])
    );
    assert_eq!(end, ExportEnd::Complete);
    // No room at all: nothing moves.
    let (none, end) = export_part(&s, Some(&resume), 0);
    assert!(none.is_empty());
    assert_eq!(end, stopped(&resume, false));

    // The heads of every site (certificates, gateway, metadata) walk apart from records.
    let (heads, end) = export_lanes(&s, (None, None), WalkLanes::Heads, 10);
    assert_eq!(heads, owned(&[order[0], order[3]]));
    assert_eq!(end, ExportEnd::Complete);
    let (first, end) = export_lanes(&s, (None, None), WalkLanes::Heads, 1);
    assert_eq!(first, owned(&order[..1]));
    let resume = name("a", Lane::Cert, "0");
    assert_eq!(end, stopped(&resume, false));
    let (second, end) = export_lanes(&s, (Some(&resume), None), WalkLanes::Heads, 1);
    assert_eq!(second, owned(&order[3..4]));
    // The budget ran out on the first name past the last: the heads walk went round.
    assert_eq!(end, stopped(&name("b", Lane::Gateway, "gw"), true));

    // A bounded walk stops before its bound, with the whole stretch sent it is complete;
    // a bound at or before where it starts is met after it wraps.
    let bounded = |after: Option<&ItemName>, until: &ItemName, budget| {
        export_lanes(&s, (after, Some(until)), WalkLanes::All, budget)
    };
    let gateway = name("b", Lane::Gateway, "gw");
    let (stretch, end) = bounded(Some(&name("a", Lane::Cert, "0")), &gateway, 10);
    assert_eq!(stretch, owned(&order[1..3]));
    assert_eq!(end, ExportEnd::Complete);
    let (stretch, end) = bounded(None, &gateway, 10);
    assert_eq!(stretch, owned(&order[..3]));
    assert_eq!(end, ExportEnd::Complete);
    let (stretch, end) = bounded(None, &gateway, 1);
    assert_eq!(stretch, owned(&order[..1]));
    assert_eq!(end, stopped(&name("a", Lane::Cert, "0"), false));
    let (stretch, end) = bounded(Some(&gateway), &name("a", Lane::State, "1"), 10);
    assert_eq!(stretch, owned(&[order[4], order[0]]));
    assert_eq!(end, ExportEnd::Complete);
    let (stretch, end) = bounded(Some(&gateway), &name("a", Lane::State, "1"), 1);
    assert_eq!(stretch, owned(&order[4..5]));
    // The budget ran out on the first name past the last, as in an unbounded walk.
    assert_eq!(end, stopped(&name("b", Lane::State, "1"), true));
    let (stretch, end) = bounded(Some(&gateway), &gateway, 10);
    assert_eq!(stretch, owned(&[order[4], order[0], order[1], order[2]]));
    assert_eq!(end, ExportEnd::Complete);

    // Names and versions alone: each the first bytes of its item, in the same order.
    let mut versions = Vec::new();
    let end = s.export(
        (None, None),
        WalkLanes::All,
        ExportForm::Versions,
        &mut Vec::new(),
        |_, entry, earlier| {
            assert!(earlier.is_none());
            versions.push(entry.to_vec());
            true
        },
    );
    assert_eq!(end, ExportEnd::Complete);
    let mut items = Vec::new();
    s.export(
        (None, None),
        WalkLanes::All,
        ExportForm::Items,
        &mut Vec::new(),
        |_, item, _| {
            items.push(item.to_vec());
            true
        },
    );
    assert_eq!(versions.len(), order.len());
    for (version, item) in versions.iter().zip(&items) {
        assert!(item.starts_with(version) && item.len() > version.len() + 8);
        let mut r = Reader::new(version);
        ItemName::decode(&mut r, &Interner::default()).unwrap();
        assert_eq!(r.u64(), Ok(1));
        assert!(r.is_empty());
    }
    // Named items: those held, in the order named; a name not held is passed over.
    let mut named = Vec::new();
    let wanted = [
        name("b", Lane::State, "1"),
        name("a", Lane::State, "9"),
        name("a", Lane::Cert, "0"),
    ];
    s.export_named(&wanted, &mut Vec::new(), |_, item, _| {
        named.push(item.to_vec());
        true
    });
    assert_eq!(named, [items[4].clone(), items[0].clone()]);

    let mut encoded_name = Vec::new();
    name("site-a", Lane::Metadata, "region").encode(&mut encoded_name);
    let decoded = ItemName::decode(&mut Reader::new(&encoded_name), &Interner::default());
    assert_eq!(decoded, Ok(name("site-a", Lane::Metadata, "region")));
    // A forgotten payload keeps its version: an older copy is not news, the same version
    // is not either while its site is not live, and is taken back once it is (and then
    // held again).
    assert!(offer(&mut s, "gone", Lane::State, "x", 0, b"p").is_none());
    assert!(s.has_forgotten("gone"));
    assert!(offer(&mut s, "gone", Lane::State, "x", 1, b"p").is_none());
    let gone = crate::identity::NodeId::new(Arc::from("gone"), "10.0.0.9:7946".parse().unwrap(), 1);
    s.set_live(&gone, true);
    assert!(offer(&mut s, "gone", Lane::State, "x", 1, b"p").is_some());
    assert!(!s.has_forgotten("gone"));
    assert!(offer(&mut s, "gone", Lane::State, "x", 1, b"p").is_none());
}

#[test]
fn recent_versions_describe_each_held_name_once_at_its_latest() {
    let mut s = store();
    s.set_clock(Duration::from_secs(10));
    offer(&mut s, "a", Lane::State, "page", 1, b"p");
    offer(&mut s, "a", Lane::State, "other", 1, b"p");
    offer(&mut s, "a", Lane::State, "page", 2, b"p");
    offer(&mut s, "b", Lane::State, "page", 7, b"p");
    offer(&mut s, "gone", Lane::State, "x", 1, b"p");
    let hash = |origin, key, version| version_hash(origin, Lane::State, key, version);
    let window = REPAIR_WINDOW;
    let now = Duration::from_secs(11);
    assert_eq!(
        s.recent_versions(now, window, 10),
        (
            vec![
                hash("gone", "x", 1),
                hash("b", "page", 7),
                hash("a", "page", 2),
                hash("a", "other", 1),
            ],
            window
        ),
        "newest first; page 1 of a was superseded by page 2"
    );
    // What is no longer held is no longer described.
    assert_eq!(s.forget("gone", &[(Lane::State, "x".to_owned())]), 1);
    let (described, _) = s.recent_versions(now, window, 10);
    assert_eq!(described.len(), 3);
    assert!(!described.contains(&hash("gone", "x", 1)));
    // Taken again once its site is back, it is described again.
    let gone = crate::identity::NodeId::new(Arc::from("gone"), "10.0.0.9:7946".parse().unwrap(), 1);
    s.set_live(&gone, true);
    assert!(offer(&mut s, "gone", Lane::State, "x", 1, b"p").is_some());
    assert_eq!(
        s.recent_versions(now, window, 10).0[0],
        hash("gone", "x", 1)
    );
    // `max` cuts the newest ones short and says how far back they reach.
    assert_eq!(s.recent_versions(now, window, 2).0.len(), 2);
    // Older than the window: not recent.
    assert!(s
        .recent_versions(Duration::from_secs(20), window, 10)
        .0
        .is_empty());
}

#[test]
fn a_peers_copy_is_taken_if_unknown_or_newer_and_not_if_forgotten_while_away() {
    let mut s = store();
    offer(&mut s, "a", Lane::State, "x", 2, b"p");
    let take = |s: &ItemStore, key: &str, version| s.would_take("a", Lane::State, key, version);
    assert_eq!(take(&s, "y", 1), Some(Taken::Unknown));
    assert_eq!(take(&s, "x", 3), Some(Taken::Newer));
    assert_eq!(take(&s, "x", 2), None);
    assert_eq!(take(&s, "x", 1), None);
    assert_eq!(s.forget("a", &[(Lane::State, "x".to_owned())]), 1);
    // Away: the same version would be dropped on arrival; a newer one is news.
    assert_eq!(take(&s, "x", 2), None);
    assert_eq!(take(&s, "x", 3), Some(Taken::Newer));
    let a = crate::identity::NodeId::new(Arc::from("a"), "10.0.0.9:7946".parse().unwrap(), 1);
    s.set_live(&a, true);
    assert_eq!(take(&s, "x", 2), Some(Taken::Newer));
}
