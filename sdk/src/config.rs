use serde::{Deserialize, Serialize};

use crate::backend;
use crate::error::{Error, Result};
use crate::wit::juju::charm::types as wit;

/// A config option's value, typed as the charm declared it.
///
/// ```
/// use charm_sdk::ConfigValue;
///
/// assert_eq!(ConfigValue::from(80), ConfigValue::Int(80));
/// assert_eq!(ConfigValue::from("nginx"), ConfigValue::String("nginx".into()));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ConfigValue {
    /// A `string` option.
    String(String),
    /// An `int` option.
    Int(i64),
    /// A `float` option.
    Float(f64),
    /// A `boolean` option.
    Boolean(bool),
}

impl From<&str> for ConfigValue {
    fn from(s: &str) -> Self {
        ConfigValue::String(s.to_string())
    }
}

impl From<String> for ConfigValue {
    fn from(s: String) -> Self {
        ConfigValue::String(s)
    }
}

impl From<i64> for ConfigValue {
    fn from(i: i64) -> Self {
        ConfigValue::Int(i)
    }
}

impl From<i32> for ConfigValue {
    fn from(i: i32) -> Self {
        ConfigValue::Int(i.into())
    }
}

impl From<f64> for ConfigValue {
    fn from(f: f64) -> Self {
        ConfigValue::Float(f)
    }
}

impl From<bool> for ConfigValue {
    fn from(b: bool) -> Self {
        ConfigValue::Boolean(b)
    }
}

impl ConfigValue {
    /// The value converted to `kind` where Juju would accept it (an int for a float option);
    /// `None` when it is of another type.
    ///
    /// ```
    /// use charm_sdk::{ConfigValue, OptionType};
    ///
    /// assert_eq!(ConfigValue::Int(2).coerce(OptionType::Float), Some(ConfigValue::Float(2.0)));
    /// assert_eq!(ConfigValue::Int(2).coerce(OptionType::String), None);
    /// ```
    pub fn coerce(self, kind: crate::OptionType) -> Option<ConfigValue> {
        use crate::OptionType as T;
        match (self, kind) {
            (v @ ConfigValue::String(_), T::String)
            | (v @ ConfigValue::Int(_), T::Int)
            | (v @ ConfigValue::Float(_), T::Float)
            | (v @ ConfigValue::Boolean(_), T::Boolean) => Some(v),
            (ConfigValue::Int(i), T::Float) => Some(ConfigValue::Float(i as f64)),
            _ => None,
        }
    }

    #[cfg_attr(not(target_family = "wasm"), allow(dead_code))]
    pub(crate) fn from_wit(v: wit::ConfigValue) -> Self {
        match v {
            wit::ConfigValue::String(s) => ConfigValue::String(s),
            wit::ConfigValue::Int(i) => ConfigValue::Int(i),
            wit::ConfigValue::Float(f) => ConfigValue::Float(f),
            wit::ConfigValue::Boolean(b) => ConfigValue::Boolean(b),
        }
    }

    pub(crate) fn into_wit(self) -> wit::ConfigValue {
        match self {
            ConfigValue::String(s) => wit::ConfigValue::String(s),
            ConfigValue::Int(i) => wit::ConfigValue::Int(i),
            ConfigValue::Float(f) => wit::ConfigValue::Float(f),
            ConfigValue::Boolean(b) => wit::ConfigValue::Boolean(b),
        }
    }
}

/// A Rust type a config value converts into.
///
/// ```
/// use charm_sdk::{ConfigValue, FromConfigValue};
///
/// assert_eq!(i64::from_config_value(ConfigValue::Int(3)), Some(3));
/// assert_eq!(f64::from_config_value(ConfigValue::Int(3)), Some(3.0));
/// assert_eq!(bool::from_config_value(ConfigValue::Int(3)), None);
/// ```
pub trait FromConfigValue: Sized {
    /// The type's name in errors.
    const TYPE_NAME: &'static str;
    /// The value as this type, if it is one.
    fn from_config_value(value: ConfigValue) -> Option<Self>;
}

impl FromConfigValue for String {
    const TYPE_NAME: &'static str = "a string";
    fn from_config_value(value: ConfigValue) -> Option<Self> {
        match value {
            ConfigValue::String(s) => Some(s),
            _ => None,
        }
    }
}

impl FromConfigValue for i64 {
    const TYPE_NAME: &'static str = "an int";
    fn from_config_value(value: ConfigValue) -> Option<Self> {
        match value {
            ConfigValue::Int(i) => Some(i),
            _ => None,
        }
    }
}

impl FromConfigValue for f64 {
    const TYPE_NAME: &'static str = "a float";
    fn from_config_value(value: ConfigValue) -> Option<Self> {
        match value {
            ConfigValue::Float(f) => Some(f),
            // An int option read as a float loses nothing a charm would care about.
            ConfigValue::Int(i) => Some(i as f64),
            _ => None,
        }
    }
}

impl FromConfigValue for bool {
    const TYPE_NAME: &'static str = "a boolean";
    fn from_config_value(value: ConfigValue) -> Option<Self> {
        match value {
            ConfigValue::Boolean(b) => Some(b),
            _ => None,
        }
    }
}

impl FromConfigValue for ConfigValue {
    const TYPE_NAME: &'static str = "a config value";
    fn from_config_value(value: ConfigValue) -> Option<Self> {
        Some(value)
    }
}

/// The application's config: the operator's settings over the declared defaults.
///
/// ```no_run
/// # fn f(model: &charm_sdk::Model) -> charm_sdk::HookResult {
/// let hostname: String = model.config().get("external_hostname")?;
/// let port: Option<i64> = model.config().get_opt("port")?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Config {
    _private: (),
}

impl Config {
    pub(crate) fn new() -> Self {
        Config { _private: () }
    }

    /// An option's value; an error if it is undeclared, unset with no default, or of
    /// another type.
    ///
    /// ```no_run
    /// # fn f(model: &charm_sdk::Model) -> charm_sdk::HookResult {
    /// let port: i64 = model.config().get("port")?;
    /// # Ok(()) }
    /// ```
    pub fn get<T: FromConfigValue>(&self, name: &str) -> Result<T> {
        self.get_opt(name)?.ok_or_else(|| Error::ConfigType {
            name: name.to_string(),
            expected: T::TYPE_NAME,
        })
    }

    /// An option's value, `None` when it has no value and no default.
    ///
    /// ```no_run
    /// # fn f(model: &charm_sdk::Model) -> charm_sdk::HookResult {
    /// let emails: Option<String> = model.config().get_opt("developer_emails")?;
    /// # Ok(()) }
    /// ```
    pub fn get_opt<T: FromConfigValue>(&self, name: &str) -> Result<Option<T>> {
        match backend::with(|b| b.config_get(name))? {
            None => Ok(None),
            Some(v) => T::from_config_value(v)
                .map(Some)
                .ok_or_else(|| Error::ConfigType {
                    name: name.to_string(),
                    expected: T::TYPE_NAME,
                }),
        }
    }

    /// Every option that has a value, sorted by name.
    ///
    /// ```no_run
    /// # fn f(model: &charm_sdk::Model) {
    /// for (name, value) in model.config().all() {
    ///     charm_sdk::log::debug(&format!("{name} = {value:?}"));
    /// }
    /// # }
    /// ```
    pub fn all(&self) -> Vec<(String, ConfigValue)> {
        backend::with(|b| b.config_get_all())
    }
}
