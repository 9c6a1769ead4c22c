//! Actions: recorded with their hook, ended in its commit, refused without a trace.

use super::*;

/// `kv`, two units, with typed actions: `put` (key: string, required; ttl: float, default
/// 2.5; note: string, optional) and `members` (no parameters), its first hooks run.
pub(crate) async fn deploy_kv(store: &dyn Store) {
    let param = |name: &str, kind, default, required| ActionParamMeta {
        name: name.into(),
        kind,
        description: format!("the {name}"),
        default,
        required,
    };
    let mut metadata = metadata("kv", vec![]);
    metadata.actions = vec![
        ActionMeta {
            name: "put".into(),
            description: "Stores a key.".into(),
            params: vec![
                param("key", OptionType::String, None, true),
                param(
                    "ttl",
                    OptionType::Float,
                    Some(ConfigValue::Float(2.5)),
                    false,
                ),
                param("note", OptionType::String, None, false),
            ],
        },
        ActionMeta {
            name: "members".into(),
            description: "Lists the members.".into(),
            params: vec![],
        },
    ];
    let kv = ApplicationRecord {
        name: "kv".into(),
        charm: "charms/kv.wasm".into(),
        metadata,
        config: BTreeMap::new(),
        module: None,
    };
    store.deploy(kv, 2).await.unwrap();
    settle(store).await;
}

pub(crate) async fn actions_are_recorded_with_their_hook_and_end_in_its_commit(store: &dyn Store) {
    deploy_kv(store).await;
    let queued = store
        .run_action("kv/0", "put", texts(&[("key", "a"), ("ttl", "3")]), 1_000)
        .await
        .unwrap();
    let action = queued.action.clone();
    assert_eq!(action.id, 1);
    assert_eq!(
        (action.unit.as_str(), action.name.as_str()),
        ("kv/0", "put")
    );
    assert_eq!(
        action.params,
        BTreeMap::from([
            ("key".to_string(), ConfigValue::String("a".into())),
            ("ttl".to_string(), ConfigValue::Float(3.0)),
        ]),
        "typed, and an optional parameter without a default left out"
    );
    assert_eq!(action.state, ActionState::Pending);
    assert_eq!(action.enqueued_ms, 1_000);
    // The hook is queued in the same step, its parameters the typed JSON object.
    assert_eq!(
        store.queued("kv/0").await.unwrap(),
        std::slice::from_ref(&queued.queued)
    );
    let Hook::Action { id, name, params } = &queued.queued.hook else {
        panic!("not an action hook: {:?}", queued.queued);
    };
    assert_eq!((id.as_str(), name.as_str()), ("1", "put"));
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(params).unwrap(),
        json!({"key": "a", "ttl": 3.0})
    );
    assert_eq!(store.action(1).await.unwrap(), action);

    let running = store.start_action(1, 2_000).await.unwrap();
    assert_eq!(
        (running.state, running.started_ms),
        (ActionState::Running, Some(2_000))
    );
    // A retried hook starting again keeps the first start.
    assert_eq!(
        store.start_action(1, 2_500).await.unwrap().started_ms,
        Some(2_000)
    );
    let output = ActionOutput {
        results: BTreeMap::from([("stored".to_string(), "a".to_string())]),
        failure: None,
        log: vec!["storing a".into()],
        ended_ms: Some(3_000),
    };
    let changes = Changes {
        action: Some(output),
        stored: writes(&[("writes", Some("1"))]),
        ..Changes::default()
    };
    store
        .commit("kv/0", Some(queued.queued.seq), &changes, None)
        .await
        .unwrap();
    let done = store.action(1).await.unwrap();
    assert_eq!(done.state, ActionState::Completed);
    assert_eq!(done.results["stored"], "a");
    assert_eq!(done.log, ["storing a"]);
    assert_eq!((done.failure, done.completed_ms), (None, Some(3_000)));
    assert_eq!(store.queued("kv/0").await.unwrap(), []);

    // A failure is kept with what the action reported; ids keep growing.
    let second = store
        .run_action("kv/1", "members", BTreeMap::new(), 4_000)
        .await
        .unwrap();
    assert_eq!(second.action.id, 2);
    assert_eq!(second.action.params, BTreeMap::new());
    let failed = Changes {
        action: Some(ActionOutput {
            failure: Some("the cluster is not formed yet".into()),
            log: vec!["looking".into()],
            ..ActionOutput::default()
        }),
        ..Changes::default()
    };
    store
        .commit("kv/1", Some(second.queued.seq), &failed, None)
        .await
        .unwrap();
    let failed = store.action(2).await.unwrap();
    assert_eq!(failed.state, ActionState::Failed);
    assert_eq!(
        failed.failure.as_deref(),
        Some("the cluster is not formed yet")
    );
    assert_eq!(failed.log, ["looking"]);
    // The first is as it was.
    assert_eq!(store.action(1).await.unwrap().state, ActionState::Completed);
    assert_eq!(
        store.action(3).await.unwrap_err(),
        StoreError::NotFound("action 3".into())
    );
    assert_eq!(
        store.start_action(3, 1).await.unwrap_err(),
        StoreError::NotFound("action 3".into())
    );
}

pub(crate) async fn refused_actions_change_nothing(store: &dyn Store) {
    deploy_kv(store).await;
    store.remove_unit("kv/1").await.unwrap();
    let before = fingerprint(store).await;
    let refused = |e: StoreError, words: &[&str]| match &e {
        StoreError::Invalid(m) if words.iter().all(|w| m.contains(w)) => {}
        other => panic!("expected a refusal naming {words:?}, got {other:?}"),
    };
    let put = |pairs: &[(&str, &str)]| texts(pairs);
    refused(
        store
            .run_action("kv/0", "get", put(&[]), 1)
            .await
            .unwrap_err(),
        &["no action \"get\"", "put, members"],
    );
    refused(
        store
            .run_action("kv/0", "put", put(&[("key", "a"), ("tll", "1")]), 1)
            .await
            .unwrap_err(),
        &["no parameter \"tll\"", "key, ttl, note"],
    );
    refused(
        store
            .run_action("kv/0", "put", put(&[("key", "a"), ("ttl", "soon")]), 1)
            .await
            .unwrap_err(),
        &["\"ttl\" is a float", "\"soon\""],
    );
    refused(
        store
            .run_action("kv/0", "put", put(&[("ttl", "1")]), 1)
            .await
            .unwrap_err(),
        &["required parameter key not given"],
    );
    refused(
        store
            .run_action("kv/0", "members", put(&[("all", "true")]), 1)
            .await
            .unwrap_err(),
        &["no parameter \"all\"", "(it has: none)"],
    );
    refused(
        store
            .run_action("kv/1", "members", put(&[]), 1)
            .await
            .unwrap_err(),
        &["unit kv/1 is being removed"],
    );
    assert_eq!(
        store
            .run_action("kv/7", "members", put(&[]), 1)
            .await
            .unwrap_err(),
        StoreError::NotFound("unit kv/7".into())
    );
    assert_eq!(
        fingerprint(store).await,
        before,
        "a refused action changed the model"
    );
    assert_eq!(
        store.action(1).await.unwrap_err(),
        StoreError::NotFound("action 1".into()),
        "a refused action was recorded"
    );
    // No id was used up by the refusals.
    let first = store
        .run_action("kv/0", "members", put(&[]), 1)
        .await
        .unwrap();
    assert_eq!(first.action.id, 1);
}
