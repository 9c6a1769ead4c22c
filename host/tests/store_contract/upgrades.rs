//! Modules kept by content hash, and upgrade-charm.

use super::*;

/// A module's bytes: over two of etcd's chunks, so a store that splits them joins them.
pub(crate) fn module_bytes(tag: &str) -> Vec<u8> {
    let mut bytes = format!("\0asm module {tag}\n").into_bytes();
    bytes.extend((0..1_300_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8));
    bytes
}

pub(crate) async fn modules_are_kept_by_content_hash(store: &dyn Store) {
    let bytes = module_bytes("a");
    let hash = store.put_module(&bytes).await.unwrap();
    assert_eq!(hash, module_hash(&bytes));
    assert_eq!(hash.len(), 64, "SHA-256 in hex: {hash}");
    // Content-addressed: the same bytes again are the same module.
    assert_eq!(store.put_module(&bytes).await.unwrap(), hash);
    assert_eq!(
        store.module(&hash).await.unwrap().as_deref(),
        Some(&bytes[..])
    );
    let other = module_bytes("b");
    let other_hash = store.put_module(&other).await.unwrap();
    assert_ne!(other_hash, hash);
    assert_eq!(store.module(&other_hash).await.unwrap(), Some(other));
    assert_eq!(
        store.module(&module_hash(b"never kept")).await.unwrap(),
        None
    );
}

/// `web`'s next release: the same endpoints, `greeting` gone, `colour` new, `port` kept.
pub(crate) fn web_next(relations: Vec<EndpointMeta>) -> CharmMetadata {
    let mut next = metadata("web", relations);
    next.config.retain(|o| o.name != "greeting");
    next.config.push(ConfigOptionMeta {
        name: "colour".into(),
        kind: OptionType::String,
        default: Some(ConfigValue::String("blue".into())),
        description: "new in this release".into(),
    });
    next
}

pub(crate) fn web_endpoints() -> Vec<EndpointMeta> {
    vec![
        endpoint("db", RelationRole::Requires, "pgsql"),
        endpoint("cluster", RelationRole::Peers, "web-peers"),
    ]
}

pub(crate) async fn upgrade_charm_carries_settings_over_and_fires_upgrade_then_config_changed(
    store: &dyn Store,
) {
    deploy(store).await;
    store
        .set_config("web", texts(&[("port", "8080")]), vec![])
        .await
        .unwrap();
    settle(store).await;
    let v2 = module_bytes("web v2");
    let upgraded = store
        .upgrade_charm("web", "charms/web-v2.wasm", web_next(web_endpoints()), &v2)
        .await
        .unwrap();
    assert_eq!(upgraded.old_module, None, "deployed without a kept module");
    assert_eq!(upgraded.new_module, module_hash(&v2));
    assert_eq!(upgraded.added, ["colour"]);
    assert_eq!(upgraded.dropped, ["greeting"], "its option is gone");
    assert_eq!(
        units_and_hooks(&upgraded.queued),
        ["web/0", "web/1", "web/2"]
            .iter()
            .flat_map(|u| [on(u, Hook::UpgradeCharm), on(u, Hook::ConfigChanged)])
            .collect::<Vec<_>>()
    );
    assert_increasing(&upgraded.queued);
    let record = store.application("web").await.unwrap();
    assert_eq!(record.charm, "charms/web-v2.wasm");
    assert_eq!(record.module.as_deref(), Some(upgraded.new_module.as_str()));
    assert_eq!(record.metadata, web_next(web_endpoints()));
    assert_eq!(
        record.config,
        BTreeMap::from([("port".to_string(), ConfigValue::Int(8080))])
    );
    // The next hook sees the new module and config: the new option at its default.
    let seen = store.snapshot("web/1").await.unwrap();
    assert_eq!(seen.module, record.module);
    assert_eq!(seen.config["colour"], ConfigValue::String("blue".into()));
    assert_eq!(seen.config["port"], ConfigValue::Int(8080));
    assert!(!seen.config.contains_key("greeting"));
    for unit in ["db/0", "other/0"] {
        assert_eq!(
            store.queued(unit).await.unwrap(),
            [],
            "{unit} heard web's upgrade"
        );
    }
    assert_eq!(store.module(&upgraded.new_module).await.unwrap(), Some(v2));
    // The next upgrade starts from this module.
    settle(store).await;
    let v3 = module_bytes("web v3");
    let again = store
        .upgrade_charm("web", "charms/web-v3.wasm", web_next(web_endpoints()), &v3)
        .await
        .unwrap();
    assert_eq!(again.old_module, Some(upgraded.new_module));
    assert_eq!((again.added.len(), again.dropped.len()), (0, 0));
    assert_eq!(again.queued.len(), 6);
}

pub(crate) async fn refused_upgrades_change_nothing(store: &dyn Store) {
    deploy(store).await;
    store
        .set_config("web", texts(&[("port", "8080")]), vec![])
        .await
        .unwrap();
    store.remove_application("other", true).await.unwrap();
    let before = fingerprint(store).await;
    let invalid = |e: StoreError, words: &[&str]| match &e {
        StoreError::Invalid(m) if words.iter().all(|w| m.contains(w)) => {}
        other => panic!("expected a refusal naming {words:?}, got {other:?}"),
    };
    let next = module_bytes("next");
    assert_eq!(
        store
            .upgrade_charm("nope", "n.wasm", web_next(web_endpoints()), &next)
            .await
            .unwrap_err(),
        StoreError::NotFound("application nope".into())
    );
    // An endpoint in use disappears: the relation using it is named.
    let without_db = vec![endpoint("cluster", RelationRole::Peers, "web-peers")];
    invalid(
        store
            .upgrade_charm("web", "n.wasm", web_next(without_db), &next)
            .await
            .unwrap_err(),
        &["web", "no endpoint \"db\"", "web:db db:db"],
    );
    let without_peers = vec![endpoint("db", RelationRole::Requires, "pgsql")];
    invalid(
        store
            .upgrade_charm("web", "n.wasm", web_next(without_peers), &next)
            .await
            .unwrap_err(),
        &["\"cluster\"", "web:cluster"],
    );
    // An endpoint in use changes its interface, or its role.
    let mysql = vec![
        endpoint("db", RelationRole::Requires, "mysql"),
        endpoint("cluster", RelationRole::Peers, "web-peers"),
    ];
    invalid(
        store
            .upgrade_charm("web", "n.wasm", web_next(mysql), &next)
            .await
            .unwrap_err(),
        &["\"db\"", "pgsql", "mysql", "web:db db:db"],
    );
    let provides = vec![
        endpoint("db", RelationRole::Provides, "pgsql"),
        endpoint("cluster", RelationRole::Peers, "web-peers"),
    ];
    invalid(
        store
            .upgrade_charm("web", "n.wasm", web_next(provides), &next)
            .await
            .unwrap_err(),
        &["\"db\"", "from requires pgsql to provides pgsql"],
    );
    invalid(
        store
            .upgrade_charm("other", "n.wasm", metadata("other", vec![]), &next)
            .await
            .unwrap_err(),
        &["other", "being removed"],
    );
    assert_eq!(fingerprint(store).await, before, "a refused upgrade wrote");
    // The module written ahead of the refused step is harmless, and kept by its hash.
    assert_eq!(store.module(&module_hash(&next)).await.unwrap(), Some(next));
}
