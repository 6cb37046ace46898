-- What will be fetched next and why: due time, priority, estimated change rate, importance.
SELECT url, status, next_fetch_time, round(priority, 4) AS priority, round(change_rate, 4) AS changes_per_day,
       round(importance, 3) AS importance, check_count, change_count, last_change_time
FROM crawldb WHERE next_fetch_time IS NOT NULL
ORDER BY priority DESC LIMIT 50;
