//! The fuzz targets' checks.

pub mod checks;
