//! Stable names: every fieldless vocabulary enum (states, outcomes, causes, answers, error
//! codes, ...) gets its lower-case name from one place, with `as_str`, `FromStr`, `Display`
//! and `ALL`. Adapters (the CLI's JSON, the WebAssembly bindings, HTTP problem types, SQL
//! columns) use these names and never spell them again.

/// A name did not belong to the vocabulary it was parsed as.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {vocabulary} `{name}` (expected one of: {expected})")]
pub struct UnknownName {
    vocabulary: &'static str,
    name: String,
    expected: String,
}

impl UnknownName {
    pub(crate) fn new(vocabulary: &'static str, name: &str, all: &[&'static str]) -> Self {
        // Bounded, so a huge input does not make a huge error message.
        let name: String = name.chars().take(64).collect();
        UnknownName { vocabulary, name, expected: all.join(", ") }
    }

    /// The vocabulary (`state`, `outcome`, ...).
    pub fn vocabulary(&self) -> &'static str {
        self.vocabulary
    }

    /// The name that was not recognised (at most 64 characters of it).
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// A vocabulary whose values have stable names.
pub trait Named: Copy + Sized + 'static {
    /// What the vocabulary is called in messages (`state`, `outcome`, ...).
    const VOCABULARY: &'static str;
    /// Every value, in a stable order.
    const ALL: &'static [Self];
    /// The value's stable name.
    fn as_str(self) -> &'static str;

    /// Parses a name produced by [`Named::as_str`].
    ///
    /// # Errors
    /// [`UnknownName`] naming the vocabulary and the names it accepts.
    fn parse_name(name: &str) -> Result<Self, UnknownName> {
        Self::ALL.iter().copied().find(|value| value.as_str() == name).ok_or_else(|| {
            let all: Vec<&'static str> = Self::ALL.iter().map(|value| value.as_str()).collect();
            UnknownName::new(Self::VOCABULARY, name, &all)
        })
    }
}

/// Gives a fieldless enum its names: `Named`, inherent `as_str` and `ALL`, `FromStr` and
/// `Display`. The `match` is exhaustive, so a variant without a name does not compile. Used by
/// the crates of idemdb for their own vocabularies.
#[macro_export]
#[doc(hidden)]
macro_rules! names {
    ($ty:ident, $vocabulary:literal, { $($variant:ident => $name:literal),+ $(,)? }) => {
        impl $crate::Named for $ty {
            const VOCABULARY: &'static str = $vocabulary;
            const ALL: &'static [Self] = &[$($ty::$variant),+];
            fn as_str(self) -> &'static str {
                match self {
                    $($ty::$variant => $name),+
                }
            }
        }

        impl $ty {
            /// Every value, in a stable order.
            pub const ALL: &'static [$ty] = <$ty as $crate::Named>::ALL;

            /// The stable name.
            pub fn as_str(self) -> &'static str {
                <$ty as $crate::Named>::as_str(self)
            }
        }

        impl core::str::FromStr for $ty {
            type Err = $crate::UnknownName;
            fn from_str(name: &str) -> Result<Self, Self::Err> {
                <$ty as $crate::Named>::parse_name(name)
            }
        }

        impl core::fmt::Display for $ty {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                f.write_str(<$ty as $crate::Named>::as_str(*self))
            }
        }
    };
}

/// Serde as the stable name, for vocabularies that cross a boundary as text (JSON). Not for
/// values inside bincode-encoded records, which keep their variant index.
pub mod as_name {
    use serde::{Deserialize, Deserializer, Serializer};

    use super::Named;

    /// Serialises the name.
    ///
    /// # Errors
    /// The serializer's.
    pub fn serialize<T: Named, S: Serializer>(value: &T, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(value.as_str())
    }

    /// Parses the name.
    ///
    /// # Errors
    /// An unknown name, as the deserializer's custom error.
    pub fn deserialize<'de, T: Named, D: Deserializer<'de>>(deserializer: D) -> Result<T, D::Error> {
        let name = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        T::parse_name(&name).map_err(serde::de::Error::custom)
    }
}
