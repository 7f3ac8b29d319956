from app import pages

pages.breaks_page()
