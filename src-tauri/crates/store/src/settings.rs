//! The user's settings in the `settings` table, one JSON value per field,
//! so adding a field later needs no migration and keeps the others.

use headroom_core::settings::Settings;

use crate::error::{Context, Result, StoreError};
use crate::Store;

impl Store {
    /// The stored settings; fields never set take their defaults. Keys this
    /// version does not know (written by a newer one) are ignored.
    pub async fn settings(&self) -> Result<Settings> {
        let rows: Vec<(String, String)> =
            sqlx::query_as("SELECT key, value FROM settings").fetch_all(&self.pool).await.ctx("read settings")?;
        let known = serde_json::to_value(Settings::default())?;
        let mut map = serde_json::Map::new();
        for (key, value) in rows {
            if known.get(&key).is_some() {
                map.insert(key, serde_json::from_str(&value).map_err(StoreError::StoredSettings)?);
            }
        }
        serde_json::from_value(serde_json::Value::Object(map)).map_err(StoreError::StoredSettings)
    }

    /// Validates, then writes every field in one transaction.
    pub async fn set_settings(&self, settings: &Settings) -> Result<()> {
        settings.validate()?;
        let serde_json::Value::Object(fields) = serde_json::to_value(settings)? else {
            unreachable!("a struct serializes to an object")
        };
        let mut tx = self.pool.begin().await.ctx("begin transaction")?;
        for (key, value) in fields {
            sqlx::query("INSERT INTO settings (key, value) VALUES (?1, ?2) ON CONFLICT (key) DO UPDATE SET value = excluded.value")
                .bind(&key)
                .bind(value.to_string())
                .execute(&mut *tx)
                .await
                .ctx("write settings")?;
        }
        tx.commit().await.ctx("commit settings")?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use headroom_core::settings::SettingsError;

    use super::*;
    use crate::testutil::store;

    #[tokio::test]
    async fn settings_default_then_round_trip_and_bad_values_change_nothing() {
        let store = store("settings").await;
        assert_eq!(store.settings().await.ok(), Some(Settings::default()));
        let mine = Settings {
            max_tokens: 64,
            temperature: 0.0,
            cloud_base_url: Some("https://api.example.com/v1".into()),
            cloud_model: Some("gpt-x".into()),
            summarise_for_cloud: true,
            // "Never" is stored as null and read back as never, not as the default.
            idle_unload_minutes: None,
            ..Settings::default()
        };
        store.set_settings(&mine).await.unwrap();
        assert_eq!(store.settings().await.ok(), Some(mine.clone()));

        let bad = Settings { server_port: 22, ..mine.clone() };
        let err = store.set_settings(&bad).await.err();
        assert!(matches!(err, Some(StoreError::Settings(SettingsError::PrivilegedPort(22)))), "{err:?}");
        assert_eq!(store.settings().await.ok(), Some(mine.clone()), "nothing was written");

        // A key from a newer version is ignored; a value this one cannot read is a clear error.
        sqlx::query("INSERT INTO settings (key, value) VALUES ('futureThing', '1')")
            .execute(store.pool())
            .await
            .unwrap();
        assert_eq!(store.settings().await.ok(), Some(mine));
        sqlx::query("UPDATE settings SET value = '\"lots\"' WHERE key = 'maxTokens'")
            .execute(store.pool())
            .await
            .unwrap();
        let msg = store.settings().await.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(msg.contains("stored settings cannot be read") && msg.contains("lots"), "{msg}");
        // The schema itself refuses values that are not JSON.
        let raw =
            sqlx::query("UPDATE settings SET value = 'not json' WHERE key = 'maxTokens'").execute(store.pool()).await;
        assert!(raw.is_err());
    }
}
