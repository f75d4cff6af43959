//! Hand-written (de)serialisation of the values that accept several shapes, with clear errors.

use core::fmt;

use super::*;
use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde::ser::SerializeSeq;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

impl Serialize for Jitter {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match *self {
            Jitter::Factor(j) => s.serialize_f64(j),
            Jitter::Range { low, high } => {
                let mut seq = s.serialize_seq(Some(2))?;
                seq.serialize_element(&low)?;
                seq.serialize_element(&high)?;
                seq.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for Jitter {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Jitter;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a boolean, a fraction like 0.5, or a [low, high] pair")
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Jitter, E> {
                Ok(if v { Jitter::HALF } else { Jitter::NONE })
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Jitter, E> {
                Ok(Jitter::Factor(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Jitter, E> {
                Ok(Jitter::Factor(v as f64))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Jitter, E> {
                Ok(Jitter::Factor(v as f64))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Jitter, A::Error> {
                let low: f64 = seq
                    .next_element()?
                    .ok_or_else(|| de::Error::invalid_length(0, &self))?;
                let high: f64 = seq
                    .next_element()?
                    .ok_or_else(|| de::Error::invalid_length(1, &self))?;
                if seq.next_element::<de::IgnoredAny>()?.is_some() {
                    return Err(de::Error::invalid_length(3, &self));
                }
                Ok(Jitter::Range { low, high })
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for BackoffTarget {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.low == self.high {
            s.serialize_u32(self.low)
        } else {
            let mut seq = s.serialize_seq(Some(2))?;
            seq.serialize_element(&self.low)?;
            seq.serialize_element(&self.high)?;
            seq.end()
        }
    }
}

impl<'de> Deserialize<'de> for BackoffTarget {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = BackoffTarget;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a whole number of triggers or a [low, high] pair")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<BackoffTarget, E> {
                let n = u32::try_from(v)
                    .map_err(|_| E::invalid_value(de::Unexpected::Unsigned(v), &self))?;
                Ok(BackoffTarget::exactly(n))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<BackoffTarget, E> {
                let n = u32::try_from(v)
                    .map_err(|_| E::invalid_value(de::Unexpected::Signed(v), &self))?;
                Ok(BackoffTarget::exactly(n))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<BackoffTarget, A::Error> {
                let low: u32 = seq
                    .next_element()?
                    .ok_or_else(|| de::Error::invalid_length(0, &self))?;
                let high: u32 = seq
                    .next_element()?
                    .ok_or_else(|| de::Error::invalid_length(1, &self))?;
                if seq.next_element::<de::IgnoredAny>()?.is_some() {
                    return Err(de::Error::invalid_length(3, &self));
                }
                Ok(BackoffTarget { low, high })
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for Rampup {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Rampup::Off => s.serialize_bool(false),
            Rampup::On(cfg) if *cfg == RampupConfig::default() => s.serialize_bool(true),
            Rampup::On(cfg) => cfg.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Rampup {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Rampup;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("true, false, or a table with backoff_target, delay_factor, min_delay")
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Rampup, E> {
                Ok(if v {
                    Rampup::On(RampupConfig::default())
                } else {
                    Rampup::Off
                })
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Rampup, A::Error> {
                RampupConfig::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(Rampup::On)
            }
        }
        d.deserialize_any(V)
    }
}
