-- Pages captured per host (successful captures in the page index), most first.
SELECT url_host_name AS host, count(*) AS captures, count(DISTINCT url) AS urls,
       sum(CASE WHEN crawl_status IN ('duplicate', 'near_duplicate') THEN 1 ELSE 0 END) AS duplicates
FROM pages WHERE subset = 'warc'
GROUP BY 1 ORDER BY captures DESC, host LIMIT 50;
