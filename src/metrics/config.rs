//! `[metrics]`: the optional extra label dimensions of `faultline_matches_total` and their
//! cardinality cap.

use super::labels::Dimension;
use super::MetricsError;

/// Distinct values a dimension admits by default before folding the rest into `other`.
pub const DEFAULT_MAX_VALUES: usize = 32;

/// One enabled dimension and its cardinality cap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DimensionConfig {
    /// The envelope field added as a label.
    pub dimension: Dimension,
    /// Distinct values admitted over the life of the process; later ones count as `other`.
    pub max_values: usize,
}

/// What [`Metrics`] exports beyond its fixed families.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetricsConfig {
    /// Extra labels of `faultline_matches_total`, in label order. Empty by default.
    pub dimensions: Vec<DimensionConfig>,
}

/// The `[metrics]` table of `faultline.toml` as written.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMetricsConfig {
    /// Envelope fields to add as labels: `["cluster"]`.
    #[serde(default)]
    pub dimensions: Vec<String>,
    /// Cardinality cap of each dimension; [`DEFAULT_MAX_VALUES`] when absent.
    pub max_values_per_dimension: Option<usize>,
}

impl MetricsConfig {
    /// Validates the raw table; errors name the field.
    pub fn from_raw(raw: &RawMetricsConfig) -> Result<Self, MetricsError> {
        let max_values = raw.max_values_per_dimension.unwrap_or(DEFAULT_MAX_VALUES);
        if max_values == 0 {
            return Err(MetricsError::Config(
                "metrics.max_values_per_dimension must be at least 1".into(),
            ));
        }
        let mut dimensions: Vec<DimensionConfig> = Vec::new();
        for (i, name) in raw.dimensions.iter().enumerate() {
            let Some(dimension) = Dimension::parse(name) else {
                let known: Vec<&str> = Dimension::ALL.iter().map(|d| d.as_str()).collect();
                return Err(MetricsError::Config(format!(
                    "metrics.dimensions[{i}] = {name:?} is not one of {known:?}"
                )));
            };
            if dimensions.iter().any(|d| d.dimension == dimension) {
                return Err(MetricsError::Config(format!(
                    "metrics.dimensions[{i}] = {name:?} is listed twice"
                )));
            }
            dimensions.push(DimensionConfig {
                dimension,
                max_values,
            });
        }
        Ok(MetricsConfig { dimensions })
    }
}
