//! Real nodes: threads, UDP sockets on 127.0.0.1 and the keyring.

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use grid_core::driver::config::SwimConfig;
use grid_core::driver::node::{Node, NodeError, NodeSettings};
use grid_core::driver::{Event, MemberState};
use grid_core::lanes::{Lane, PublishError};
use grid_core::wire::frame::DropReason;

mod support;
use support::TestCa;

const K1: [u8; 32] = [1; 32];
const K2: [u8; 32] = [2; 32];

fn settings(site: &str) -> NodeSettings {
    NodeSettings {
        bind: "127.0.0.1:0".parse().unwrap(),
        advertise: None,
        site: site.to_owned(),
        generation: None,
        swim: SwimConfig {
            probe_interval: Duration::from_millis(100),
            suspicion_timeout: Duration::from_millis(400),
            gossip_nodes: 3,
            push_pull_interval: Duration::from_secs(1),
        },
        event_capacity: 64,
        item_capacity: grid_core::driver::DEFAULT_ITEM_CAPACITY,
    }
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !done() {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn two_nodes_meet_exchange_an_item_rotate_keys_and_part() {
    let ca = TestCa::new();
    let a = Node::bind(settings("a"), &[&K1], ca.node_trust("a")).unwrap();
    let b = Node::bind(settings("b"), &[&K1], ca.node_trust("b")).unwrap();
    a.start().unwrap();
    b.start().unwrap();
    b.join(vec![a.local().socket_addr()]).unwrap();

    match b.next_event(Some(Duration::from_secs(5))) {
        Some(Event::MemberUp(id)) => assert_eq!(id.site().as_ref(), "a"),
        other => panic!("{other:?}"),
    }
    assert!(a.publish(Lane::State, "k", 1, b"v").unwrap());
    match b.next_event(Some(Duration::from_secs(5))) {
        Some(Event::Item(item)) => assert_eq!(&*item.payload, b"v"),
        other => panic!("{other:?}"),
    }

    for node in [&a, &b] {
        node.install_key(&K2).unwrap();
    }
    for node in [&a, &b] {
        node.use_key(&K2).unwrap();
    }
    std::thread::sleep(Duration::from_millis(300));
    for node in [&a, &b] {
        node.remove_key(&K1).unwrap();
    }
    std::thread::sleep(Duration::from_millis(300));
    for node in [&a, &b] {
        assert_eq!(node.stats().frames.drops, [0; DropReason::ALL.len()]);
        assert_eq!(node.key_ids().len(), 1);
    }

    b.leave().unwrap();
    assert!(!b.is_running());
    wait_until("b seen as left", || {
        a.members()
            .iter()
            .any(|m| m.id.site().as_ref() == "b" && m.state == MemberState::Left)
    });
    assert!(matches!(
        b.publish(Lane::State, "k", 2, b""),
        Err(NodeError::Stopped)
    ));
    a.close().unwrap();
    let start = Instant::now();
    while a.next_event(Some(Duration::from_secs(5))).is_some() {}
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "a stopped node does not keep readers waiting"
    );
}

#[test]
fn junk_is_counted_and_wakes_nothing_else() {
    let ca = TestCa::new();
    let node = Node::bind(settings("solo"), &[&K1], ca.node_trust("solo")).unwrap();
    node.start().unwrap();
    let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
    let to = node.local().socket_addr();
    sender.send_to(b"short", to).unwrap();
    sender.send_to(&[b'X'; 40], to).unwrap();
    let mut wrong_version = b"GRID\x02".to_vec();
    wrong_version.resize(40, 0);
    sender.send_to(&wrong_version, to).unwrap();
    let mut forged = b"GRID\x01".to_vec();
    forged.resize(80, 7);
    sender.send_to(&forged, to).unwrap();
    sender.send_to(&[b'G'; 1401], to).unwrap();
    wait_until("five drops", || {
        node.stats().frames.drops == [1, 1, 1, 1, 1]
    });
    assert_eq!(node.poll_events(10), []);
    node.close().unwrap();
}

#[test]
fn bad_settings_are_refused_before_binding() {
    let ca = TestCa::new();
    let trust = ca.node_trust("a");
    let mut bad = settings("a");
    bad.site = "no spaces".into();
    assert!(matches!(
        Node::bind(bad, &[&K1], trust.clone()),
        Err(NodeError::Site(_))
    ));
    assert!(matches!(
        Node::bind(settings("a"), &[&[0; 31]], trust.clone()),
        Err(NodeError::Keyring(_))
    ));
    assert!(matches!(
        Node::bind(settings("a"), &[], trust.clone()),
        Err(NodeError::Keyring(_))
    ));
    let mut wildcard = settings("a");
    wildcard.bind = "0.0.0.0:0".parse().unwrap();
    assert!(matches!(
        Node::bind(wildcard, &[&K1], trust.clone()),
        Err(NodeError::Config(_))
    ));
    let taken = Node::bind(settings("a"), &[&K1], trust).unwrap();
    let mut clash = settings("b");
    clash.bind = taken.bound_addr();
    assert!(matches!(
        Node::bind(clash, &[&K1], ca.node_trust("b")),
        Err(NodeError::Bind { .. })
    ));
}

#[test]
fn credentials_that_cannot_sign_for_the_site_are_refused_before_binding() {
    let ca = TestCa::new();
    // Another site's certificate.
    let other = ca.node_trust("b");
    assert!(matches!(
        Node::bind(settings("a"), &[&K1], other),
        Err(NodeError::Credentials(_))
    ));
    // The right certificate with another certificate's key.
    let mut mismatched = ca.node_trust("a");
    mismatched.private_key = ca.node_trust("a").private_key;
    assert!(matches!(
        Node::bind(settings("a"), &[&K1], mismatched),
        Err(NodeError::Credentials(_))
    ));
    // A certificate no configured CA vouches for.
    let mut stranger = TestCa::new().node_trust("a");
    stranger.anchors = vec![ca.der()];
    let Err(err) = Node::bind(settings("a"), &[&K1], stranger) else {
        panic!("refused")
    };
    assert!(err.to_string().contains("does not chain"), "{err}");
    // A pin that is another certificate's.
    let mut pinned = ca.node_trust("a");
    pinned.pins.insert("a".into(), vec![[7; 32]]);
    let Err(err) = Node::bind(settings("a"), &[&K1], pinned) else {
        panic!("refused")
    };
    assert!(err.to_string().contains("pinned"), "{err}");
    // Junk key bytes never appear in the message.
    let mut junk = ca.node_trust("a");
    junk.private_key = b"SECRET-CANARY-0123456789".to_vec();
    let Err(err) = Node::bind(settings("a"), &[&K1], junk) else {
        panic!("refused")
    };
    assert!(!err.to_string().contains("CANARY"), "{err}");
}

#[test]
fn many_items_are_offered_in_one_exchange_each_with_its_own_outcome() {
    let ca = TestCa::new();
    let mut small = settings("a");
    small.item_capacity = 3;
    let a = Node::bind(small, &[&K1], ca.node_trust("a")).unwrap();
    a.start().unwrap();
    assert!(a.publish(Lane::State, "held", 5, b"v").unwrap());
    let item = |key: &str, version: u64, payload: &[u8]| {
        (Lane::State, key.to_owned(), version, payload.to_vec())
    };
    let outcomes = a
        .publish_many(vec![
            item("one", 1, b"x"),
            item("held", 4, b"older"),
            item("big", 1, &[0; 2000]),
            item("two", 1, b"y"),
            item("three", 1, b"z"),
            item("held", 6, b"newer"),
        ])
        .unwrap();
    assert_eq!(outcomes[0], Ok(true));
    assert_eq!(outcomes[1], Ok(false), "not newer than what is held");
    assert!(matches!(outcomes[2], Err(PublishError::TooLarge { .. })));
    assert_eq!(outcomes[3], Ok(true));
    assert_eq!(
        outcomes[4],
        Err(PublishError::StoreFull),
        "past the capacity"
    );
    assert_eq!(
        outcomes[5],
        Ok(true),
        "a held name still takes newer versions"
    );
    wait_until("three items stored", || a.stats().driver.items_stored == 3);
    a.close().unwrap();
    assert!(matches!(
        a.publish_many(vec![item("late", 1, b"")]),
        Err(NodeError::Stopped)
    ));
}
