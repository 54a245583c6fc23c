//! The heads walk: a node catching up on a store larger than one answer holds every site's
//! certificates, gateway and metadata long before the whole store.

use super::store::part_bytes;
use super::*;

/// Every gateway item of `sites` held at `at`.
fn holds_gateways(c: &Cluster, at: SocketAddr, sites: &[SocketAddr]) -> bool {
    let items = c.items_at(at);
    sites.iter().filter(|site| **site != at).all(|site| {
        let origin = format!("site-{}", site.port() - 7000);
        items
            .iter()
            .any(|item| item.0 == origin && item.1 == Lane::Gateway)
    })
}

#[test]
fn a_joiner_holds_every_sites_gateway_long_before_the_whole_store() {
    let mut c = Cluster::new();
    // The sites take each other's items by push/pull walks (each push/pull that brings
    // many names sets off a catch-up).
    c.swim.push_pull_interval = Duration::from_secs(5);
    let sites = c.add_joined(4, 100);
    let payload = [7u8; 900];
    let per_site = 150;
    for at in &sites {
        c.publish_providers(*at, per_site, &payload);
        assert!(c.publish(*at, Lane::Gateway, "gateway", 1, b"10.0.0.1:8443"));
    }
    let others = (sites.len() - 1) * (per_site + 1);
    c.run_until(Duration::from_secs(60), |c| {
        sites.iter().all(|at| c.items_at(*at).len() == others)
    });
    let whole = sites.len() * (per_site + 1);
    let parts = (whole * (payload.len() + 100)).div_ceil(part_bytes());
    assert!(parts >= 4, "the store spans several answers ({parts})");

    let late = c.add(9, 100);
    c.join(late, sites[0]);
    let bound = (CATCH_UP_PAUSE + TICK * 10) * (parts as u32 * 2);
    let heads = c.run_until(bound, |c| holds_gateways(c, late, &sites));
    let rest = c.run_until(bound, |c| c.items_at(late).len() == whole);
    let stats = c.nodes[&late].stats();
    assert!(stats.heads_syncs >= 1, "{stats:?}");
    // Every site's heads came in the first parts, not as the whole walk reached each site
    // in name order (the last site's gateway would come with the last part).
    assert!(
        heads * 3 < heads + rest,
        "heads {heads:?}, then the rest {rest:?}"
    );
    assert!(heads <= (CATCH_UP_PAUSE + TICK * 10) * 3, "heads {heads:?}");
    c.run_until(bound, |c| c.nodes[&late].stats().caught_up);
    assert_eq!(c.items_at(late).len(), whole, "each item delivered once");
    c.assert_driver_healthy();
}
