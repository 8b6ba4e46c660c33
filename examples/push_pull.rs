use pslite::{Config, DefaultHandler, KVServer, KVWorker, Postoffice, Role};
use std::thread;

fn main() -> pslite::Result<()> {
    let port = pslite::free_port()?; // scheduler, 1 server, 1 worker: threads on loopback
    let cfg = move |role| Config::local(role, port, 1, 1);
    let scheduler = thread::spawn(move || Postoffice::start(cfg(Role::Scheduler))?.finalize());
    let server = thread::spawn(move || -> pslite::Result<()> {
        let po = Postoffice::start(cfg(Role::Server))?;
        let _kv = KVServer::<f32>::new(&po, 0, DefaultHandler::new())?; // sums pushes
        po.finalize()
    });
    let po = Postoffice::start(cfg(Role::Worker))?;
    let kv = KVWorker::<f32>::new(&po, 0, 0)?; // application 0, customer 0
    let keys = [1, 7]; // sorted, unique
    kv.wait(kv.push(&keys, &[1.0, 2.0, 10.0, 20.0], None)?)?; // 2 values per key
    let mut out = [0.0f32; 4];
    kv.pull_into(&keys, &mut out)?; // blocks until every server answered
    assert_eq!(out, [1.0, 2.0, 10.0, 20.0]);
    po.finalize()?;
    scheduler.join().unwrap()?;
    server.join().unwrap()
}
