//! The compiled-charm cache: a directory of components compiled by Cranelift, so that a charm
//! is compiled once per engine configuration instead of at every start of the host.
//!
//! An entry is named by the SHA-256 of the charm's bytes and of the engine's compatibility
//! hash (wasmtime's version, target, compiler flags and tunables), so a changed charm or a
//! changed engine never meets a stale artifact. Entries are written to a temporary file and
//! renamed into place, so readers never see half an entry; each ends with the SHA-256 of its
//! name and artifact, checked before wasmtime sees it. Any problem with an entry (unreadable,
//! truncated, corrupt, from an incompatible engine) is logged and the charm is compiled
//! again: the cache can make loading faster, never make it fail.

use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

/// The environment variable that moves the cache (a directory) or turns it off (`off`, or
/// empty).
pub const CACHE_ENV: &str = "CHARM_HOST_CACHE";

/// Bumped when the entry format changes, so old entries are never misread.
const FORMAT: &[u8] = b"charm-host compiled component v1";
/// Length of the checksum that ends each entry.
const CHECKSUM_LEN: usize = 32;

/// The default cache directory: `$CHARM_HOST_CACHE` if set (`off` or empty turns the cache
/// off), else `$XDG_CACHE_HOME/charm-host`, else `$HOME/.cache/charm-host`, else
/// `.charm-host/cache` under the current directory.
pub fn default_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os(CACHE_ENV) {
        return (!dir.is_empty() && dir != "off").then(|| PathBuf::from(dir));
    }
    let nonempty = |name| std::env::var_os(name).filter(|v| !v.is_empty());
    Some(if let Some(xdg) = nonempty("XDG_CACHE_HOME") {
        PathBuf::from(xdg).join("charm-host")
    } else if let Some(home) = nonempty("HOME") {
        PathBuf::from(home).join(".cache/charm-host")
    } else {
        PathBuf::from(".charm-host/cache")
    })
}

/// Why a cache entry was not used or not written. Never fatal: logged, then the charm is
/// compiled.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CacheError {
    /// Reading or writing the entry failed.
    #[error("{path}: {source}")]
    Io {
        /// The entry.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The entry is shorter than its checksum or its checksum does not match.
    #[error("{path}: corrupt entry (checksum mismatch)")]
    Corrupt {
        /// The entry.
        path: PathBuf,
    },
    /// wasmtime refused the artifact (another engine's, say) or could not serialize it.
    #[error("{path}: {source:#}")]
    Wasm {
        /// The entry.
        path: PathBuf,
        /// wasmtime's error.
        source: wasmtime::Error,
    },
}

/// The checksum that ends an entry: of its name as well as its artifact, so that a sound
/// artifact copied under another charm's name is refused rather than run as that charm.
fn checksum_of(entry: &Path, artifact: &[u8]) -> [u8; CHECKSUM_LEN] {
    let name = entry
        .file_name()
        .map(|n| n.as_encoded_bytes())
        .unwrap_or_default();
    Sha256::new()
        .chain_update(name)
        .chain_update(artifact)
        .finalize()
        .into()
}

/// A directory of compiled charms for one engine.
#[derive(Debug, Clone)]
pub(crate) struct CompileCache {
    dir: PathBuf,
    /// The engine's compatibility hash, computed once.
    engine_key: [u8; 32],
}

/// Feeds `Hash` impls into SHA-256, so wasmtime's compatibility hash can be part of a
/// digest that is stable across processes (std's hashers are randomly keyed).
struct Sha256Hasher(Sha256);

impl Hasher for Sha256Hasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    fn finish(&self) -> u64 {
        let digest = self.0.clone().finalize();
        u64::from_le_bytes(
            digest[..8]
                .try_into()
                .expect("a SHA-256 digest has 32 bytes"),
        )
    }
}

impl CompileCache {
    /// A cache in `dir` for artifacts of `engine`. The directory is created on first write.
    pub(crate) fn new(engine: &Engine, dir: PathBuf) -> Self {
        let mut hasher = Sha256Hasher(Sha256::new());
        hasher.write(FORMAT);
        engine.precompile_compatibility_hash().hash(&mut hasher);
        CompileCache {
            dir,
            engine_key: hasher.0.finalize().into(),
        }
    }

    /// The entry for a charm with these bytes.
    pub(crate) fn entry(&self, wasm: &[u8]) -> PathBuf {
        let digest = Sha256::new()
            .chain_update(self.engine_key)
            .chain_update(wasm)
            .finalize();
        let mut name = String::with_capacity(2 * digest.len() + 6);
        for byte in digest {
            name.push_str(&format!("{byte:02x}"));
        }
        name.push_str(".cwasm");
        self.dir.join(name)
    }

    /// The compiled component in `entry`, if there is a sound one.
    pub(crate) fn get(
        &self,
        engine: &Engine,
        entry: &Path,
    ) -> Result<Option<Component>, CacheError> {
        let bytes = match std::fs::read(entry) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(CacheError::Io {
                    path: entry.to_owned(),
                    source,
                });
            }
        };
        let corrupt = || CacheError::Corrupt {
            path: entry.to_owned(),
        };
        let split = bytes.len().checked_sub(CHECKSUM_LEN).ok_or_else(corrupt)?;
        let (artifact, checksum) = bytes.split_at(split);
        if checksum_of(entry, artifact).as_slice() != checksum {
            return Err(corrupt());
        }
        // SAFETY: `deserialize` requires bytes that `Component::serialize` produced (it
        // checks the engine's compatibility itself). The checksum shows this is the artifact
        // `put` wrote, byte for byte, and the cache directory is as trusted as the host
        // binary: whoever can write it could replace the binary as well.
        let component = unsafe { Component::deserialize(engine, artifact) }.map_err(|source| {
            CacheError::Wasm {
                path: entry.to_owned(),
                source,
            }
        })?;
        Ok(Some(component))
    }

    /// Writes `component` to `entry`, atomically: a temporary file renamed into place.
    pub(crate) fn put(&self, entry: &Path, component: &Component) -> Result<(), CacheError> {
        static TEMP: AtomicU64 = AtomicU64::new(0);
        let io = |source| CacheError::Io {
            path: entry.to_owned(),
            source,
        };
        let mut artifact = component.serialize().map_err(|source| CacheError::Wasm {
            path: entry.to_owned(),
            source,
        })?;
        let checksum = checksum_of(entry, &artifact);
        artifact.extend_from_slice(&checksum);
        std::fs::create_dir_all(&self.dir).map_err(io)?;
        // Unique per process and per write, so concurrent writers never share a temp file.
        let temp = self.dir.join(format!(
            ".{}.{}.{}.tmp",
            entry
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("entry"),
            std::process::id(),
            TEMP.fetch_add(1, Ordering::Relaxed)
        ));
        let written = std::fs::File::create(&temp)
            .and_then(|mut file| file.write_all(&artifact))
            .and_then(|()| std::fs::rename(&temp, entry));
        if let Err(e) = written {
            let _ = std::fs::remove_file(&temp);
            return Err(io(e));
        }
        Ok(())
    }
}
