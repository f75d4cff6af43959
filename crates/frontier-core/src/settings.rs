//! The frontier's ordering settings ([`QueueOrder`], [`StartOrder`], kept in
//! [`FrontierConfig`]) and [`SettingsFile`], the one table users write with both the
//! throttler's settings and these.

#[cfg(feature = "serde")]
use core::fmt;

use polite_throttle_core::{ConfigError, Settings};

use crate::frontier::FrontierConfig;

/// Order within one priority.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
#[non_exhaustive]
pub enum QueueOrder {
    /// Last in, first out: depth-first crawling (Scrapy's default).
    #[default]
    Lifo,
    /// First in, first out: breadth-first when combined with `depth_priority = 1`.
    Fifo,
}

/// Order of start requests within one priority.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
#[non_exhaustive]
pub enum StartOrder {
    /// In the order they were pushed (the default).
    #[default]
    Fifo,
    /// Most recently pushed first.
    Lifo,
    /// No special treatment: start requests are ordered like any other request.
    Same,
}

/// The settings users write (a TOML file, a JSON document): one flat table holding the
/// throttler's [`Settings`] and the frontier's ordering keys (`depth_priority`,
/// `depth_limit`, `scheduler_order`, `start_order`, the serialisable part of
/// [`FrontierConfig`]), with Scrapy's names (docs/behaviour.md section 2).
///
/// Deserialising it routes the four frontier keys to `frontier` and every other key to
/// `throttle`, so an unknown key is still an error naming it. The other fields of
/// `frontier` keep their defaults.
///
/// ```
/// # #[cfg(feature = "serde")] {
/// use polite_frontier_core::{QueueOrder, SettingsFile};
///
/// let s: SettingsFile = serde_json::from_str(
///     r#"{"download_delay": 0.5, "depth_priority": 1, "scheduler_order": "fifo"}"#,
/// ).unwrap();
/// assert_eq!(s.throttle.download_delay, 0.5);
/// assert_eq!(s.frontier.scheduler_order, QueueOrder::Fifo);
///
/// let err = serde_json::from_str::<SettingsFile>(r#"{"depth_limt": 3}"#).unwrap_err();
/// assert!(err.to_string().contains("unknown field `depth_limt`"), "{err}");
/// # }
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct SettingsFile {
    /// Everything but the frontier's keys.
    #[cfg_attr(feature = "serde", serde(flatten))]
    pub throttle: Settings,
    /// The frontier's ordering keys (its other options at their defaults).
    #[cfg_attr(feature = "serde", serde(flatten))]
    pub frontier: FrontierConfig,
}

impl SettingsFile {
    /// Both halves.
    pub fn new(throttle: Settings, frontier: FrontierConfig) -> Self {
        SettingsFile { throttle, frontier }
    }

    /// Checks the settings ([`Settings::validate`]). Every value of the frontier's keys
    /// that parses is valid: their types reject the rest (a negative `depth_limit`, an
    /// unknown order) when the table is read.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.throttle.validate()
    }
}

#[cfg(feature = "serde")]
mod de {
    use super::*;
    use alloc::string::String;
    use serde::de::{self, DeserializeSeed, IntoDeserializer, MapAccess, Visitor};
    use serde::{Deserialize, Deserializer};

    impl<'de> Deserialize<'de> for SettingsFile {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            d.deserialize_map(FileVisitor)
        }
    }

    struct FileVisitor;

    impl<'de> Visitor<'de> for FileVisitor {
        type Value = SettingsFile;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a table of settings")
        }

        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<SettingsFile, A::Error> {
            let mut frontier = FrontierConfig::default();
            // `Settings` reads every key but the frontier's, which `Split` takes out on
            // the way: errors (an unknown key, a bad value) come from the document's own
            // deserializer, with its positions.
            let throttle = Settings::deserialize(de::value::MapAccessDeserializer::new(Split {
                inner: map,
                frontier: &mut frontier,
            }))?;
            Ok(SettingsFile { throttle, frontier })
        }
    }

    /// A map that hands the frontier's keys to `frontier` and the others on.
    struct Split<'a, A> {
        inner: A,
        frontier: &'a mut FrontierConfig,
    }

    impl<'de, A: MapAccess<'de>> MapAccess<'de> for Split<'_, A> {
        type Error = A::Error;

        fn next_key_seed<K: DeserializeSeed<'de>>(
            &mut self,
            seed: K,
        ) -> Result<Option<K::Value>, A::Error> {
            let mut seed = Some(seed);
            loop {
                // The key is read through the document's deserializer, so an unknown one
                // is reported where it is (a TOML line, a JSON position).
                let key = self.inner.next_key_seed(KeySeed { seed: &mut seed })?;
                let f = &mut *self.frontier;
                match key {
                    None => return Ok(None),
                    Some(Key::Other(value)) => return Ok(Some(value)),
                    Some(Key::DepthPriority) => f.depth_priority = self.inner.next_value()?,
                    Some(Key::DepthLimit) => f.depth_limit = self.inner.next_value()?,
                    Some(Key::SchedulerOrder) => f.scheduler_order = self.inner.next_value()?,
                    Some(Key::StartOrder) => f.start_order = self.inner.next_value()?,
                }
            }
        }

        fn next_value_seed<V: DeserializeSeed<'de>>(
            &mut self,
            seed: V,
        ) -> Result<V::Value, A::Error> {
            self.inner.next_value_seed(seed)
        }

        fn size_hint(&self) -> Option<usize> {
            self.inner.size_hint()
        }
    }

    /// A key of the table: one of the frontier's, or another one, already given to the
    /// `Settings` key seed.
    enum Key<V> {
        DepthPriority,
        DepthLimit,
        SchedulerOrder,
        StartOrder,
        Other(V),
    }

    /// Reads a key and keeps `seed` (`Settings`'s) for the first key that is not the
    /// frontier's.
    struct KeySeed<'s, K> {
        seed: &'s mut Option<K>,
    }

    impl<'de, K: DeserializeSeed<'de>> DeserializeSeed<'de> for KeySeed<'_, K> {
        type Value = Key<K::Value>;

        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            let key = String::deserialize(d)?;
            Ok(match key.as_str() {
                "depth_priority" => Key::DepthPriority,
                "depth_limit" => Key::DepthLimit,
                "scheduler_order" => Key::SchedulerOrder,
                "start_order" => Key::StartOrder,
                _ => {
                    let seed = self
                        .seed
                        .take()
                        .ok_or_else(|| de::Error::custom("a key after the last one"))?;
                    Key::Other(seed.deserialize(key.into_deserializer())?)
                }
            })
        }
    }
}

#[cfg(all(test, feature = "serde"))]
mod tests {
    use super::*;
    use alloc::string::ToString;

    const ALL_FOUR: &str = r#"
        download_delay = 2
        depth_priority = 1
        depth_limit = 3
        scheduler_order = "fifo"
        start_order = "same"
        [scopes."api.example.com"]
        concurrency = 4
    "#;

    #[test]
    fn a_file_with_all_four_frontier_keys_loads() {
        let s: SettingsFile = toml::from_str(ALL_FOUR).unwrap();
        s.validate().unwrap();
        assert_eq!(s.throttle.download_delay, 2.0);
        assert_eq!(s.throttle.scopes["api.example.com"].concurrency, Some(4));
        assert_eq!(s.frontier.depth_priority, 1);
        assert_eq!(s.frontier.depth_limit, 3);
        assert_eq!(s.frontier.scheduler_order, QueueOrder::Fifo);
        assert_eq!(s.frontier.start_order, StartOrder::Same);
        // Written back as one flat table, and read again the same.
        let back = toml::to_string(&s).unwrap();
        assert!(back.contains("scheduler_order = \"fifo\""), "{back}");
        assert_eq!(toml::from_str::<SettingsFile>(&back).unwrap(), s);
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<SettingsFile>(&json).unwrap(), s);
    }

    #[test]
    fn unknown_keys_and_bad_values_are_rejected_by_name() {
        let err = toml::from_str::<SettingsFile>("depth_priority = 1\ndownload_dela = 1\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown field `download_dela`"), "{err}");
        assert!(err.contains("line 2"), "the key's own line: {err}");
        let err = serde_json::from_str::<SettingsFile>(r#"{"scheduler_order": "random"}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown variant `random`"), "{err}");
        let err = serde_json::from_str::<SettingsFile>(r#"{"depth_limit": -1}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("invalid value"), "{err}");
        assert!(
            serde_json::from_str::<SettingsFile>(r#"{"scopes": {"a": {"concurency": 1}}}"#)
                .is_err()
        );
    }

    #[test]
    fn defaults_match_an_empty_table() {
        let s: SettingsFile = serde_json::from_str("{}").unwrap();
        assert_eq!(s, SettingsFile::default());
        assert_eq!(s.frontier.scheduler_order, QueueOrder::Lifo);
        assert_eq!(s.frontier.start_order, StartOrder::Fifo);
        assert_eq!((s.frontier.depth_priority, s.frontier.depth_limit), (0, 0));
    }
}
