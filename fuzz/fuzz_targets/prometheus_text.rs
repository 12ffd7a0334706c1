#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| goodput::fuzzing::prometheus_text(data));
