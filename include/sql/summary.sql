-- One-line summary per round: captures, distinct URLs and hosts, statuses.
SELECT round, count(*) AS captures, count(DISTINCT url) AS urls, count(DISTINCT url_host_name) AS hosts,
       sum(CASE WHEN crawl_status = 'fetched' THEN 1 ELSE 0 END) AS fetched,
       sum(CASE WHEN crawl_status IN ('duplicate', 'near_duplicate') THEN 1 ELSE 0 END) AS duplicates,
       sum(CASE WHEN warc_type = 'revisit' THEN 1 ELSE 0 END) AS revisits
FROM pages WHERE subset = 'warc' GROUP BY 1 ORDER BY 1;
