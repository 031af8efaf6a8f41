//! The built library exports every entry point of `symbols::EXPORTED`, under its exact name,
//! and no `cu*` symbol the list does not name.

use cuda_standin::symbols::{EXPORTED, TEST_ONLY};
#[macro_use]
mod common;

#[test]
fn every_listed_entry_point_is_exported() {
    // SAFETY: loading the stand-in runs no initialiser with preconditions.
    let lib = unsafe { libloading::Library::new(common::library_path()) }.unwrap();
    let missing: Vec<&str> = EXPORTED
        .iter()
        .copied()
        // SAFETY: only the symbol's presence is checked; nothing is called.
        .filter(|name| unsafe { lib.get::<*const ()>(format!("{name}\0").as_bytes()) }.is_err())
        .collect();
    assert!(missing.is_empty(), "not exported: {missing:?}");
}

#[test]
fn every_exported_entry_point_is_listed() {
    let out = std::process::Command::new("nm").args(["-D", "--defined-only"]).arg(common::library_path()).output().expect("nm");
    assert!(out.status.success());
    let exported: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().last())
        .filter(|s| s.starts_with("cu") && s.as_bytes().get(2).is_some_and(u8::is_ascii_uppercase))
        .map(str::to_string)
        .collect();
    assert!(exported.len() >= EXPORTED.len(), "nm found only {exported:?}");
    let unlisted: Vec<&String> = exported.iter().filter(|s| !EXPORTED.contains(&s.as_str()) && !TEST_ONLY.contains(&s.as_str())).collect();
    assert!(unlisted.is_empty(), "exported but not in symbols::EXPORTED: {unlisted:?}");
}

#[test]
fn the_library_has_the_drivers_soname() {
    let out = std::process::Command::new("readelf").args(["-d"]).arg(common::library_path()).output().expect("readelf");
    assert!(String::from_utf8_lossy(&out.stdout).contains("[libcuda.so.1]"));
}
