use crate::config::ConfigValue;
use crate::wit::juju::charm::types as wit;

/// The role of an endpoint.
///
/// ```
/// let meta = charm_sdk::Metadata::new("kv").peers("cluster", "kv-cluster");
/// assert_eq!(meta.relations[0].role, charm_sdk::RelationRole::Peers);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelationRole {
    /// This charm provides the interface.
    Provides,
    /// This charm requires the interface.
    Requires,
    /// Units of this application relate to each other.
    Peers,
}

/// An endpoint the charm declares.
///
/// ```
/// let meta = charm_sdk::Metadata::new("web").requires("db", "pgsql");
/// assert_eq!(meta.relations[0].interface, "pgsql");
/// assert_eq!(meta.relations[0].limit, None);
/// let limited = charm_sdk::Metadata::new("web").requires("db", "pgsql").limit(1);
/// assert_eq!(limited.relations[0].limit, Some(1));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelationMeta {
    /// The endpoint's name, such as `db`.
    pub name: String,
    /// Its role.
    pub role: RelationRole,
    /// The interface spoken on it, such as `pgsql`.
    pub interface: String,
    /// The most relations it accepts; `None` for no limit. Set with [`Metadata::limit`].
    pub limit: Option<u32>,
}

/// The declared type of a config option.
///
/// ```
/// let meta = charm_sdk::Metadata::new("web").bool_option("debug", Some(false), "");
/// assert_eq!(meta.config[0].kind, charm_sdk::OptionType::Boolean);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptionType {
    /// Text.
    String,
    /// A 64-bit integer.
    Int,
    /// A 64-bit float.
    Float,
    /// True or false.
    Boolean,
}

impl OptionType {
    fn into_wit(self) -> wit::OptionType {
        match self {
            OptionType::String => wit::OptionType::String,
            OptionType::Int => wit::OptionType::Int,
            OptionType::Float => wit::OptionType::Float,
            OptionType::Boolean => wit::OptionType::Boolean,
        }
    }
}

/// A config option the charm declares.
///
/// ```
/// use charm_sdk::{ConfigOption, Metadata, OptionType};
/// let meta = Metadata::new("web").option(ConfigOption {
///     name: "workers".into(),
///     kind: OptionType::Int,
///     default: Some(4.into()),
///     description: "Worker processes".into(),
/// });
/// assert_eq!(meta.config[0].name, "workers");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigOption {
    /// The option's name.
    pub name: String,
    /// Its type.
    pub kind: OptionType,
    /// Its default, if any.
    pub default: Option<ConfigValue>,
    /// What it does.
    pub description: String,
}

/// An action the charm declares.
///
/// ```
/// let meta = charm_sdk::Metadata::new("db").action("backup", "Dumps the database");
/// assert_eq!(meta.actions[0].description, "Dumps the database");
/// assert!(meta.actions[0].params.is_empty());
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ActionMeta {
    /// The action's name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// The parameters it takes. The host refuses a run whose parameters do not match them,
    /// before the action's hook starts, and fills in the defaults of those not given.
    pub params: Vec<ActionParam>,
}

/// A parameter an action declares: its name and type, and either required or with a
/// default. A parameter that is neither may be left out, and the action then does without.
///
/// ```
/// use charm_sdk::{ActionParam, ConfigValue, OptionType};
///
/// let key = ActionParam::string("key", "The key to write").required();
/// assert!(key.required && key.default.is_none());
/// let ttl = ActionParam::int("ttl", "Seconds to keep it").default(300);
/// assert_eq!(ttl.kind, OptionType::Int);
/// assert_eq!(ttl.default, Some(ConfigValue::Int(300)));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ActionParam {
    /// The parameter's name.
    pub name: String,
    /// Its type.
    pub kind: OptionType,
    /// What it is for.
    pub description: String,
    /// Its value when the operator gives none; of type `kind`.
    pub default: Option<ConfigValue>,
    /// Whether the operator must give it (only meaningful without a default).
    pub required: bool,
}

impl ActionParam {
    /// An optional parameter of type `kind`, with no default.
    ///
    /// ```
    /// let p = charm_sdk::ActionParam::new("n", charm_sdk::OptionType::Int, "How many");
    /// assert!(!p.required);
    /// ```
    pub fn new(name: impl Into<String>, kind: OptionType, description: impl Into<String>) -> Self {
        ActionParam {
            name: name.into(),
            kind,
            description: description.into(),
            default: None,
            required: false,
        }
    }

    /// An optional `string` parameter.
    ///
    /// ```
    /// assert_eq!(charm_sdk::ActionParam::string("key", "").kind, charm_sdk::OptionType::String);
    /// ```
    pub fn string(name: impl Into<String>, description: impl Into<String>) -> Self {
        Self::new(name, OptionType::String, description)
    }

    /// An optional `int` parameter.
    ///
    /// ```
    /// assert_eq!(charm_sdk::ActionParam::int("n", "").kind, charm_sdk::OptionType::Int);
    /// ```
    pub fn int(name: impl Into<String>, description: impl Into<String>) -> Self {
        Self::new(name, OptionType::Int, description)
    }

    /// An optional `float` parameter.
    ///
    /// ```
    /// assert_eq!(charm_sdk::ActionParam::float("r", "").kind, charm_sdk::OptionType::Float);
    /// ```
    pub fn float(name: impl Into<String>, description: impl Into<String>) -> Self {
        Self::new(name, OptionType::Float, description)
    }

    /// An optional `boolean` parameter.
    ///
    /// ```
    /// assert_eq!(charm_sdk::ActionParam::boolean("f", "").kind, charm_sdk::OptionType::Boolean);
    /// ```
    pub fn boolean(name: impl Into<String>, description: impl Into<String>) -> Self {
        Self::new(name, OptionType::Boolean, description)
    }

    /// The same parameter, which the operator must give.
    ///
    /// ```
    /// assert!(charm_sdk::ActionParam::string("key", "").required().required);
    /// ```
    pub fn required(mut self) -> Self {
        self.required = true;
        self
    }

    /// The same parameter with a default, used when the operator gives none. A default of
    /// another type than the parameter's makes the host refuse the charm when it loads.
    ///
    /// ```
    /// let p = charm_sdk::ActionParam::boolean("force", "").default(false);
    /// assert_eq!(p.default, Some(charm_sdk::ConfigValue::Boolean(false)));
    /// ```
    pub fn default(mut self, value: impl Into<ConfigValue>) -> Self {
        self.default = Some(value.into());
        self
    }
}

/// What a charm declares: its name, endpoints, config options and actions.
///
/// ```
/// use charm_sdk::{ConfigValue, Metadata, RelationRole};
///
/// let meta = Metadata::new("discourse")
///     .summary("Discussion forum")
///     .requires("db", "pgsql")
///     .string_option("external_hostname", Some("discourse.local"), "Public host name")
///     .int_option("replicas", Some(1), "Workers");
/// assert_eq!(meta.relations[0].role, RelationRole::Requires);
/// assert_eq!(meta.config[1].default, Some(ConfigValue::Int(1)));
/// ```
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Metadata {
    /// The charm's name.
    pub name: String,
    /// One line saying what it runs.
    pub summary: String,
    /// Its endpoints.
    pub relations: Vec<RelationMeta>,
    /// Its config options.
    pub config: Vec<ConfigOption>,
    /// Its actions.
    pub actions: Vec<ActionMeta>,
}

impl Metadata {
    /// Metadata for a charm with this name and nothing declared yet.
    ///
    /// ```
    /// let meta = charm_sdk::Metadata::new("web");
    /// assert!(meta.relations.is_empty() && meta.config.is_empty());
    /// ```
    pub fn new(name: impl Into<String>) -> Self {
        Metadata {
            name: name.into(),
            ..Default::default()
        }
    }

    /// Sets the one-line summary.
    ///
    /// ```
    /// assert_eq!(charm_sdk::Metadata::new("web").summary("A web server").summary, "A web server");
    /// ```
    pub fn summary(mut self, summary: impl Into<String>) -> Self {
        self.summary = summary.into();
        self
    }

    fn endpoint(
        mut self,
        name: impl Into<String>,
        role: RelationRole,
        interface: impl Into<String>,
    ) -> Self {
        self.relations.push(RelationMeta {
            name: name.into(),
            role,
            interface: interface.into(),
            limit: None,
        });
        self
    }

    /// Declares an endpoint that provides `interface`.
    ///
    /// ```
    /// let meta = charm_sdk::Metadata::new("postgresql").provides("db", "pgsql");
    /// assert_eq!(meta.relations[0].role, charm_sdk::RelationRole::Provides);
    /// ```
    pub fn provides(self, name: impl Into<String>, interface: impl Into<String>) -> Self {
        self.endpoint(name, RelationRole::Provides, interface)
    }

    /// Declares an endpoint that requires `interface`.
    ///
    /// ```
    /// let meta = charm_sdk::Metadata::new("discourse").requires("db", "pgsql");
    /// assert_eq!(meta.relations[0].role, charm_sdk::RelationRole::Requires);
    /// ```
    pub fn requires(self, name: impl Into<String>, interface: impl Into<String>) -> Self {
        self.endpoint(name, RelationRole::Requires, interface)
    }

    /// Declares a peer endpoint.
    ///
    /// ```
    /// let meta = charm_sdk::Metadata::new("kv").peers("cluster", "kv-cluster");
    /// assert_eq!(meta.relations[0].name, "cluster");
    /// ```
    pub fn peers(self, name: impl Into<String>, interface: impl Into<String>) -> Self {
        self.endpoint(name, RelationRole::Peers, interface)
    }

    /// Limits the endpoint declared last to at most `limit` relations, as `limit:` does in
    /// a Juju `metadata.yaml`; an endpoint without one accepts any number. Write it right
    /// after the [`provides`](Self::provides), [`requires`](Self::requires) or
    /// [`peers`](Self::peers) it is about.
    ///
    /// ```
    /// use charm_sdk::Metadata;
    ///
    /// let meta = Metadata::new("discourse")
    ///     .requires("db", "pgsql")
    ///     .limit(1)
    ///     .provides("website", "http");
    /// assert_eq!(meta.relations[0].limit, Some(1));
    /// assert_eq!(meta.relations[1].limit, None);
    /// ```
    ///
    /// # Panics
    ///
    /// When no endpoint has been declared yet: there is nothing to limit, and a charm's
    /// metadata is the same every time, so its first test shows the mistake.
    ///
    /// ```should_panic
    /// charm_sdk::Metadata::new("web").limit(1);
    /// ```
    pub fn limit(mut self, limit: u32) -> Self {
        let endpoint = self.relations.last_mut().expect(
            "Metadata::limit: declare the endpoint (provides, requires or peers) before its limit",
        );
        endpoint.limit = Some(limit);
        self
    }

    /// Declares a config option.
    ///
    /// ```
    /// use charm_sdk::{ConfigOption, Metadata, OptionType};
    /// let option = ConfigOption { name: "tls".into(), kind: OptionType::Boolean, default: None, description: String::new() };
    /// assert_eq!(Metadata::new("web").option(option).config.len(), 1);
    /// ```
    pub fn option(mut self, option: ConfigOption) -> Self {
        self.config.push(option);
        self
    }

    fn typed_option(
        self,
        name: &str,
        kind: OptionType,
        default: Option<ConfigValue>,
        description: &str,
    ) -> Self {
        self.option(ConfigOption {
            name: name.to_string(),
            kind,
            default,
            description: description.to_string(),
        })
    }

    /// Declares a `string` option.
    ///
    /// ```
    /// let meta = charm_sdk::Metadata::new("web").string_option("image", Some("nginx"), "The image");
    /// assert_eq!(meta.config[0].default, Some(charm_sdk::ConfigValue::String("nginx".into())));
    /// ```
    pub fn string_option(self, name: &str, default: Option<&str>, description: &str) -> Self {
        let default = default.map(|d| ConfigValue::String(d.to_string()));
        self.typed_option(name, OptionType::String, default, description)
    }

    /// Declares an `int` option.
    ///
    /// ```
    /// let meta = charm_sdk::Metadata::new("web").int_option("port", Some(80), "The port");
    /// assert_eq!(meta.config[0].kind, charm_sdk::OptionType::Int);
    /// ```
    pub fn int_option(self, name: &str, default: Option<i64>, description: &str) -> Self {
        self.typed_option(
            name,
            OptionType::Int,
            default.map(ConfigValue::Int),
            description,
        )
    }

    /// Declares a `float` option.
    ///
    /// ```
    /// let meta = charm_sdk::Metadata::new("web").float_option("ratio", None, "");
    /// assert_eq!(meta.config[0].default, None);
    /// ```
    pub fn float_option(self, name: &str, default: Option<f64>, description: &str) -> Self {
        self.typed_option(
            name,
            OptionType::Float,
            default.map(ConfigValue::Float),
            description,
        )
    }

    /// Declares a `boolean` option.
    ///
    /// ```
    /// let meta = charm_sdk::Metadata::new("web").bool_option("debug", Some(true), "");
    /// assert_eq!(meta.config[0].default, Some(charm_sdk::ConfigValue::Boolean(true)));
    /// ```
    pub fn bool_option(self, name: &str, default: Option<bool>, description: &str) -> Self {
        self.typed_option(
            name,
            OptionType::Boolean,
            default.map(ConfigValue::Boolean),
            description,
        )
    }

    /// Declares an action.
    ///
    /// ```
    /// let meta = charm_sdk::Metadata::new("kv").action("get", "Reads a key");
    /// assert_eq!(meta.actions[0].name, "get");
    /// ```
    pub fn action(self, name: &str, description: &str) -> Self {
        self.action_with(name, description, [])
    }

    /// Declares an action and the parameters it takes. The host checks an operator's run
    /// against them before the hook starts (as does [`testing`](crate::testing)): an
    /// undeclared parameter, a value of another type, or a required one left out refuses
    /// the run; the defaults of those left out are filled in.
    ///
    /// ```
    /// use charm_sdk::{ActionParam, Metadata};
    ///
    /// let meta = Metadata::new("kv").action_with(
    ///     "put",
    ///     "Stores a value",
    ///     [
    ///         ActionParam::string("key", "The key").required(),
    ///         ActionParam::string("value", "The value").required(),
    ///         ActionParam::int("ttl", "Seconds to keep it; 0 for ever").default(0),
    ///     ],
    /// );
    /// assert_eq!(meta.actions[0].params.len(), 3);
    /// assert_eq!(meta.actions[0].params[2].name, "ttl");
    /// ```
    pub fn action_with(
        mut self,
        name: &str,
        description: &str,
        params: impl IntoIterator<Item = ActionParam>,
    ) -> Self {
        self.actions.push(ActionMeta {
            name: name.to_string(),
            description: description.to_string(),
            params: params.into_iter().collect(),
        });
        self
    }

    pub(crate) fn into_wit(self) -> wit::Metadata {
        wit::Metadata {
            name: self.name,
            summary: self.summary,
            relations: self
                .relations
                .into_iter()
                .map(|r| wit::RelationMeta {
                    name: r.name,
                    role: match r.role {
                        RelationRole::Provides => wit::RelationRole::Provides,
                        RelationRole::Requires => wit::RelationRole::Requires,
                        RelationRole::Peers => wit::RelationRole::Peers,
                    },
                    interface: r.interface,
                    limit: r.limit,
                })
                .collect(),
            config: self
                .config
                .into_iter()
                .map(|o| wit::ConfigOption {
                    name: o.name,
                    kind: o.kind.into_wit(),
                    default: o.default.map(ConfigValue::into_wit),
                    description: o.description,
                })
                .collect(),
            actions: self
                .actions
                .into_iter()
                .map(|a| wit::ActionMeta {
                    name: a.name,
                    description: a.description,
                    params: a
                        .params
                        .into_iter()
                        .map(|p| wit::ActionParam {
                            name: p.name,
                            kind: p.kind.into_wit(),
                            description: p.description,
                            default: p.default.map(ConfigValue::into_wit),
                            required: p.required,
                        })
                        .collect(),
                })
                .collect(),
        }
    }
}
