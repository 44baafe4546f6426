/*
 * settings.h
 *     The finalize.* settings and the names shared by every subsystem.
 */
#ifndef FINALIZE_SETTINGS_H
#define FINALIZE_SETTINGS_H

/* Name of the extension's schema (the extension is not relocatable): the
 * user's API. */
#define FINALIZE_SCHEMA "finalize"

/* The schema of finalize's internal functions, on no user's search_path. */
#define FINALIZE_INTERNAL_SCHEMA "finalize_internal"

/* Settings (finalize.*); see settings.c for their meaning and defaults. */
extern char *finalize_database;
extern bool finalize_enabled;
extern int	finalize_poll_interval_ms;
extern int	finalize_max_source_workers;
extern int	finalize_worker_connections;
extern int	finalize_max_sources;
extern int	finalize_full_check_interval_ms;
extern int	finalize_login_timeout;
extern int	finalize_query_timeout;
extern int	finalize_source_check_timeout;
extern int	finalize_max_retry_interval_ms;
extern int	finalize_data_loss_window_min;
extern int	finalize_facts_retention_min;
extern int	finalize_s3_timeout_ms;
extern int	finalize_s3_connect_timeout_ms;
extern int	finalize_generation_retention_min;
extern int	finalize_lock_timeout_ms;
extern int	finalize_max_clock_skew_s;
extern int	finalize_s3_max_pages;
extern int	finalize_gate_max_problems;
extern int	finalize_gate_max_delta_kb;
extern int	finalize_iceberg_max_manifest_kb;
extern int	finalize_consumer_stall_threshold_s;
extern int	finalize_late_data_alert_interval_s;
extern int	finalize_alert_after_s;
extern int	finalize_alert_retry_limit;
extern bool finalize_alerts_enabled;

extern void settings_define(void);

#endif							/* FINALIZE_SETTINGS_H */
