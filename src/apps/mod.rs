pub mod kv_app;
