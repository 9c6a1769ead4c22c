//! Followers' wake-ups on memory and SQLite: a release wakes them, nothing else does.

use super::*;

/// Whether `signal` moves within a second.
pub(crate) async fn woken(signal: &mut tokio::sync::watch::Receiver<u64>) -> bool {
    tokio::time::timeout(Duration::from_secs(1), signal.changed())
        .await
        .is_ok_and(|r| r.is_ok())
}

/// A release wakes the lease's followers; a claim, a renewal and a release by another unit
/// (which releases nothing) do not.
pub(crate) async fn a_release_wakes_the_followers(
    holder: Arc<dyn Store>,
    follower: Arc<dyn Store>,
) {
    let mut gone = follower
        .clone()
        .lease_signal("web")
        .expect("the store signals");
    hold(holder.as_ref(), "web", "web/0", LONG).await;
    hold(holder.as_ref(), "web", "web/0", LONG).await;
    holder.release("web", "web/1").await.unwrap();
    assert!(!woken(&mut gone).await, "woken with the lease still held");
    holder.release("web", "web/0").await.unwrap();
    assert!(woken(&mut gone).await, "the release was not heard");
    // Others' leases are theirs.
    hold(holder.as_ref(), "db", "db/0", LONG).await;
    holder.release("db", "db/0").await.unwrap();
    assert!(
        !woken(&mut gone).await,
        "woken by another application's release"
    );
}

#[tokio::test]
async fn memory_a_release_wakes_the_followers() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new("m"));
    a_release_wakes_the_followers(store.clone(), store).await;
}

#[tokio::test]
async fn sqlite_a_release_wakes_the_followers_here() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(sqlite_store(dir.path()));
    a_release_wakes_the_followers(store.clone(), store).await;
}

#[tokio::test]
async fn sqlite_a_release_by_another_connection_on_the_file_wakes_the_followers() {
    // Each handle has its own connection, as another process on the file would.
    let dir = tempfile::tempdir().unwrap();
    let holder: Arc<dyn Store> = Arc::new(sqlite_store(dir.path()));
    let follower: Arc<dyn Store> = Arc::new(sqlite_store(dir.path()));
    a_release_wakes_the_followers(holder, follower).await;
}
