//! SQLite as Mobibench drives it (paper 003): a real database (rusqlite, SQLite bundled) on
//! the target's directory, `PRAGMA page_size=4096`, `synchronous=FULL`, journal mode DELETE or
//! WAL; `rows` rows of `value_size` random bytes are inserted (setup), then `updates`
//! transactions each replace one random row's value — one commit, and so at least one fsync,
//! per update.

use crate::outcome::Outcome;
use crate::target::Target;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::io;
use std::time::Instant;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SqliteConfig {
    /// `DELETE` or `WAL`.
    pub journal: String,
    pub rows: usize,
    pub value_size: usize,
    pub updates: usize,
    pub seed: u64,
}

fn db_err(e: rusqlite::Error) -> io::Error {
    io::Error::other(format!("sqlite: {e}"))
}

pub fn run(
    t: &dyn Target,
    cfg: &SqliteConfig,
    between: &dyn Fn() -> io::Result<()>,
) -> io::Result<Outcome> {
    let Some(dir) = t.dir() else {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "SQLite needs a mounted target (a directory), not the in-process engine",
        ));
    };
    if !matches!(cfg.journal.as_str(), "DELETE" | "WAL") || cfg.rows == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "sqlite: journal DELETE or WAL, and at least one row",
        ));
    }
    let start = Instant::now();
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let path = dir.join("mobibench.db");
    let db = rusqlite::Connection::open(&path).map_err(db_err)?;
    db.execute_batch(&format!(
        "PRAGMA page_size=4096; PRAGMA journal_mode={}; PRAGMA synchronous=FULL;
         CREATE TABLE tblMyList (id INTEGER PRIMARY KEY, Value TEXT, creation_date INTEGER);",
        cfg.journal
    ))
    .map_err(db_err)?;
    let value = |rng: &mut StdRng| -> String {
        (0..cfg.value_size)
            .map(|_| char::from(b'a' + rng.gen_range(0..26u8)))
            .collect()
    };
    {
        let tx = db.unchecked_transaction().map_err(db_err)?;
        {
            let mut ins = tx
                .prepare("INSERT INTO tblMyList (id, Value, creation_date) VALUES (?1, ?2, ?3)")
                .map_err(db_err)?;
            for id in 0..cfg.rows {
                ins.execute(rusqlite::params![id as i64, value(&mut rng), id as i64])
                    .map_err(db_err)?;
            }
        }
        tx.commit().map_err(db_err)?;
    }
    // closed and opened again around `between`, so SQLite's own page cache starts cold too
    db.close().map_err(|(_, e)| db_err(e))?;
    between()?;
    let db = rusqlite::Connection::open(&path).map_err(db_err)?;
    db.execute_batch("PRAGMA synchronous=FULL;")
        .map_err(db_err)?;
    let mut lat = crate::latency::Latencies::new();
    let measured = Instant::now();
    {
        let mut upd = db
            .prepare("UPDATE tblMyList SET Value = ?1 WHERE id = ?2")
            .map_err(db_err)?;
        for _ in 0..cfg.updates {
            let id = rng.gen_range(0..cfg.rows) as i64;
            let v = value(&mut rng);
            // one autocommit transaction: the update and its commit (journal, fsyncs)
            let changed = lat
                .time("update", || upd.execute(rusqlite::params![v, id]))
                .map_err(db_err)?;
            if changed != 1 {
                return Err(io::Error::other(format!("sqlite: row {id} not updated")));
            }
        }
    }
    let secs = measured.elapsed().as_secs_f64();
    db.close().map_err(|(_, e)| db_err(e))?;
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let p = dir.join(format!("mobibench.db{suffix}"));
        if p.exists() {
            std::fs::remove_file(p)?;
        }
    }
    Ok(
        Outcome::new(cfg.updates as f64, "transactions", secs, start)
            .count("inserts", cfg.rows as u64)
            .count("updates", cfg.updates as u64)
            .bytes(0, ((cfg.rows + cfg.updates) * cfg.value_size) as u64)
            .latency(&lat),
    )
}
