//! Leases: claims, renewals, expiry, release and terms.

use super::*;

pub(crate) async fn first_claim_gets_a_term(store: &dyn Store) {
    let claim = store.claim("web", "web/0", LONG).await.unwrap();
    let Claim::Held(lease) = claim else {
        panic!("the first claim was denied: {claim:?}");
    };
    assert_eq!((lease.holder.as_str(), lease.duration), ("web/0", LONG));
    assert!(lease.term >= 1, "terms start above zero: {lease:?}");
    let leader = store.leader("web").await.unwrap().expect("a live lease");
    assert_eq!((leader.holder.as_str(), leader.term), ("web/0", lease.term));
    assert!(
        leader.duration <= LONG && leader.duration > LONG - Duration::from_secs(5),
        "{leader:?}"
    );
    assert_eq!(store.leader("db").await.unwrap(), None);
}

pub(crate) async fn holder_claim_extends_and_keeps_term(store: &dyn Store) {
    let lease = short() * 3;
    let term = hold(store, "web", "web/0", lease).await.term;
    tokio::time::sleep(short() * 2).await;
    let again = store.claim("web", "web/0", lease).await.unwrap();
    assert_eq!(
        again,
        Claim::Held(Lease {
            holder: "web/0".into(),
            term,
            duration: lease
        })
    );
    // Four ticks after the first claim: only the extension keeps it alive.
    tokio::time::sleep(short() * 2).await;
    let leader = store
        .leader("web")
        .await
        .unwrap()
        .expect("the extension keeps the lease");
    assert_eq!((leader.holder.as_str(), leader.term), ("web/0", term));
}

pub(crate) async fn other_claim_denied_while_lease_live(store: &dyn Store) {
    let term = hold(store, "web", "web/0", LONG).await.term;
    let claim = store.claim("web", "web/1", LONG).await.unwrap();
    let Claim::Denied {
        holder,
        term: denied_term,
        expires_in,
    } = claim
    else {
        panic!("a live lease's claim by another unit is denied, got {claim:?}");
    };
    assert_eq!((holder.as_str(), denied_term), ("web/0", term));
    // Where the store says when the lease ends, it is the lease's own end (rounded up to
    // the store's millisecond: a follower must not claim before it).
    if let Some(left) = expires_in {
        assert!(
            left <= LONG + Duration::from_millis(2) && left > LONG - Duration::from_secs(60),
            "the denial says the lease ends in {left:?}, granted for {LONG:?}"
        );
    }
    let leader = store.leader("web").await.unwrap().unwrap();
    assert_eq!((leader.holder.as_str(), leader.term), ("web/0", term));
}

pub(crate) async fn expired_lease_goes_to_next_claimant_with_a_greater_term(store: &dyn Store) {
    let first = hold(store, "web", "web/0", short()).await.term;
    tokio::time::sleep(past_short()).await;
    assert_eq!(
        store.leader("web").await.unwrap(),
        None,
        "the lease outlived its duration"
    );
    let claim = store.claim("web", "web/1", LONG).await.unwrap();
    let Claim::Held(lease) = claim else {
        panic!("the lapsed lease was not granted: {claim:?}");
    };
    assert_eq!((lease.holder.as_str(), lease.duration), ("web/1", LONG));
    assert!(lease.term > first, "term {} after {first}", lease.term);
}

pub(crate) async fn holder_reclaiming_after_expiry_gets_new_term(store: &dyn Store) {
    let first = hold(store, "web", "web/0", short()).await.term;
    tokio::time::sleep(past_short()).await;
    let again = hold(store, "web", "web/0", LONG).await.term;
    assert!(again > first, "term {again} after {first}");
}

pub(crate) async fn release_frees_lease_and_terms_never_repeat(store: &dyn Store) {
    let first = hold(store, "web", "web/0", LONG).await.term;
    // Only the holder can release.
    store.release("web", "web/1").await.unwrap();
    assert_eq!(
        store.leader("web").await.unwrap().map(|l| l.holder),
        Some("web/0".into())
    );
    store.release("web", "web/0").await.unwrap();
    assert_eq!(store.leader("web").await.unwrap(), None);
    let mut terms = vec![first];
    for unit in ["web/1", "web/0", "web/0", "web/2"] {
        let fence = hold(store, "web", unit, LONG).await;
        terms.push(fence.term);
        store.release("web", unit).await.unwrap();
    }
    assert!(
        terms.windows(2).all(|w| w[0] < w[1]),
        "a term was reused: {terms:?}"
    );
}

pub(crate) async fn terms_are_per_application(store: &dyn Store) {
    deploy(store).await;
    let web = hold(store, "web", "web/0", short()).await.term;
    tokio::time::sleep(past_short()).await;
    assert!(hold(store, "web", "web/0", LONG).await.term > web);
    // db's leadership is its own: web's new term does not fence db's commits.
    let db = hold(store, "db", "db/0", LONG).await;
    let changes = Changes {
        app_status: Some(status(StatusKind::Active, "leading")),
        ..Changes::default()
    };
    store
        .commit("db/0", None, &changes, Some(&db))
        .await
        .expect("db's own term fences db's commit");
}
